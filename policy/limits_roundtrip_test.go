package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// everyLimit sets every field of runtime.Limits, found by reflection so a
// field added later cannot be left out, to a distinct non-default value
// that each form can carry (whole milliseconds, whole MiB).
func everyLimit(t *testing.T) runtime.Limits {
	var l runtime.Limits
	v := reflect.ValueOf(&l).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Type() == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(time.Duration(i+1)*time.Second + 500*time.Millisecond))
		case f.CanInt():
			f.SetInt(int64(i+3) << 20)
		case f.CanFloat():
			f.SetFloat(float64(i) + 0.25)
		default:
			t.Fatalf("runtime.Limits.%s: no test value for %s", v.Type().Field(i).Name, f.Type())
		}
	}
	return l
}

func TestLimitsRoundTrip(t *testing.T) {
	in := everyLimit(t)
	t.Run("json", func(t *testing.T) {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out runtime.Limits
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if out != in {
			t.Fatalf("JSON %s lost fields:\n got %+v\nwant %+v", b, out, in)
		}
	})
	t.Run("hcl", func(t *testing.T) {
		var body strings.Builder
		for _, f := range runtime.LimitFields {
			v := reflect.ValueOf(f.Ptr(&in)).Elem().Interface()
			if d, ok := v.(time.Duration); ok {
				v = fmt.Sprintf("%q", d.String())
			}
			fmt.Fprintf(&body, "  %s = %v\n", f.HCL, v)
		}
		src := "limits {\n" + body.String() + "}\n" +
			"policy \"r\" {\n  skills = [\"*\"]\n  limits {\n" + body.String() + "  }\n}\n"
		c, err := policy.Parse([]byte(src), "limits.hcl")
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		if c.Limits != in {
			t.Fatalf("limits {} lost fields:\n got %+v\nwant %+v", c.Limits, in)
		}
		if len(c.Rules) != 1 || c.Rules[0].Limits != in {
			t.Fatalf("a rule's limits {} lost fields: %+v", c.Rules)
		}
		if got, _ := c.LimitsFor("x"); got != in {
			t.Fatalf("LimitsFor:\n got %+v\nwant %+v", got, in)
		}
	})
	t.Run("audit", func(t *testing.T) {
		dir := t.TempDir()
		l, err := audit.Open(dir, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(context.Background(), &audit.Record{Event: audit.EventRunEnd, Run: &audit.RunInfo{Script: "scripts/a.py", Limits: in}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		var got []runtime.Limits
		if err := audit.Read(dir, func(r *audit.Record) error {
			if r.Run != nil {
				got = append(got, r.Run.Limits)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != in {
			t.Fatalf("audit record lost fields:\n got %+v\nwant %+v", got, in)
		}
	})
}
