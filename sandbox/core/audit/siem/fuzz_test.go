package siem

import (
	"encoding/json"
	"testing"
)

// FuzzMap maps arbitrary record lines, as a log that anyone with write
// access to the audit directory could have edited: every format must
// either refuse the line or write one JSON object, and an OCSF event's
// type_uid must follow from its class and activity.
func FuzzMap(f *testing.F) {
	for _, r := range everyEvent() {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"event":"run.end","run":{"exit_code":null,"args":[1]}}`))
	f.Add([]byte(`{"event":"egress.connect","egress":{"kind":"aggregate","address":"::1%eth0"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"time":"0001-01-01T00:00:00Z","seq":18446744073709551615,"detail":{"a.b":{"c":[{}]}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, format := range Formats {
			m, err := NewMapper(format, "dev")
			if err != nil {
				t.Fatal(err)
			}
			msg, err := m.Map(line, nil)
			if err != nil {
				continue
			}
			o, err := decodeObject(msg.Body)
			if err != nil {
				t.Fatalf("%s: mapped record is not a JSON object: %v\n%s", format, err, msg.Body)
			}
			if format == FormatOCSF && intOf(o["type_uid"]) != intOf(o["class_uid"])*100+intOf(o["activity_id"]) {
				t.Fatalf("type_uid %v for class %v activity %v", o["type_uid"], o["class_uid"], o["activity_id"])
			}
		}
	})
}
