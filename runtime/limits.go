package runtime

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// LimitKind says how a limit is written: in HCL (a duration string, a size
// like "4MiB", a whole number, a decimal) and in JSON.
type LimitKind int

const (
	LimitDuration LimitKind = iota // time.Duration; JSON in whole milliseconds
	LimitSize                      // int64 bytes
	LimitCount                     // int or int64, at least 1
	LimitFloat                     // float64
)

// LimitField describes one field of Limits. LimitFields is the one list of
// them: defaults, tightening by policy, the JSON form and the HCL schema are
// all derived from it, so a limit cannot be enforced without being written
// down, or written down without being read back.
type LimitField struct {
	Field   string // Go field name in Limits
	HCL     string // attribute in a limits {} block
	JSON    string // key in the JSON form
	Kind    LimitKind
	Default any // of the field's type
	// Sandbox limits are fixed when a sandbox is created (see
	// SandboxLimits); the others are each job's own.
	Sandbox bool

	index int
}

// LimitFields lists every field of Limits, in the order of the JSON form.
// Every limit is tightened the same way: smaller wins, and zero (or less)
// means "not set".
var LimitFields = []LimitField{
	{Field: "Timeout", HCL: "timeout", JSON: "timeout_ms", Kind: LimitDuration, Default: 30 * time.Second},
	{Field: "MemoryBytes", HCL: "memory", JSON: "memory_bytes", Kind: LimitSize, Default: int64(512 << 20), Sandbox: true},
	{Field: "Pids", HCL: "pids", JSON: "pids", Kind: LimitCount, Default: int64(128), Sandbox: true},
	{Field: "CPUs", HCL: "cpus", JSON: "cpus", Kind: LimitFloat, Default: float64(1), Sandbox: true},
	// The output caps fit an unpacked office document (thousands of parts,
	// hundreds of MiB); the tmpfs sizes are ceilings, allocated as written
	// and charged to the run's memory limit.
	{Field: "WorkdirBytes", HCL: "workdir", JSON: "workdir_bytes", Kind: LimitSize, Default: int64(1 << 30), Sandbox: true},
	{Field: "TmpBytes", HCL: "tmp", JSON: "tmp_bytes", Kind: LimitSize, Default: int64(256 << 20), Sandbox: true},
	{Field: "StdoutBytes", HCL: "stdout", JSON: "stdout_bytes", Kind: LimitSize, Default: int64(1 << 20)},
	{Field: "StderrBytes", HCL: "stderr", JSON: "stderr_bytes", Kind: LimitSize, Default: int64(1 << 20)},
	{Field: "OutputBytes", HCL: "outputs", JSON: "output_bytes", Kind: LimitSize, Default: int64(512 << 20)},
	{Field: "OutputFiles", HCL: "output_files", JSON: "output_files", Kind: LimitCount, Default: 20000},
	{Field: "OutputFileBytes", HCL: "output_file_bytes", JSON: "output_file_bytes", Kind: LimitSize, Default: int64(256 << 20)},
	{Field: "EgressConnections", HCL: "egress_connections", JSON: "egress_connections", Kind: LimitCount, Default: 256},
	{Field: "EgressBytesOut", HCL: "egress_bytes_out", JSON: "egress_bytes_out", Kind: LimitSize, Default: int64(256 << 20)},
}

// DefaultLimits are used for every field left zero (LimitFields' defaults).
var DefaultLimits = defaultLimits()

// limitsJSONType is the struct the JSON form is encoded through, built from
// LimitFields: the same key order, omitempty and key matching as a written
// struct would have.
var limitsJSONType = limitsJSONStruct()

// indexLimitFields checks LimitFields against Limits and SandboxLimits and
// records each field's index. It runs from package variable initializers
// (which may run before init), and again harmlessly.
func indexLimitFields() {
	lt, st := reflect.TypeOf(Limits{}), reflect.TypeOf(SandboxLimits{})
	if len(LimitFields) != lt.NumField() {
		panic(fmt.Sprintf("runtime: LimitFields has %d entries for the %d fields of Limits", len(LimitFields), lt.NumField()))
	}
	nsb := 0
	for i := range LimitFields {
		f := &LimitFields[i]
		sf, ok := lt.FieldByName(f.Field)
		if !ok {
			panic("runtime: LimitFields names no field Limits." + f.Field)
		}
		f.index = sf.Index[0]
		if want := limitKindTypes[f.Kind]; !slices.Contains(want, sf.Type) || reflect.TypeOf(f.Default) != sf.Type {
			panic(fmt.Sprintf("runtime: Limits.%s is a %s: its kind or default is of another type", f.Field, sf.Type))
		}
		if sbf, ok := st.FieldByName(f.Field); ok != f.Sandbox || (ok && sbf.Type != sf.Type) {
			panic("runtime: Limits." + f.Field + " and SandboxLimits disagree")
		}
		if f.Sandbox {
			nsb++
		}
	}
	if nsb != st.NumField() {
		panic("runtime: SandboxLimits has fields LimitFields does not mark Sandbox")
	}
}

// limitKindTypes are the Go types a field of each kind may have.
var limitKindTypes = map[LimitKind][]reflect.Type{
	LimitDuration: {reflect.TypeOf(time.Duration(0))},
	LimitSize:     {reflect.TypeOf(int64(0))},
	LimitCount:    {reflect.TypeOf(int64(0)), reflect.TypeOf(0)},
	LimitFloat:    {reflect.TypeOf(float64(0))},
}

func defaultLimits() Limits {
	indexLimitFields()
	var d Limits
	for _, f := range LimitFields {
		f.value(&d).Set(reflect.ValueOf(f.Default))
	}
	return d
}

func limitsJSONStruct() reflect.Type {
	indexLimitFields()
	var jf []reflect.StructField
	for _, f := range LimitFields {
		t := reflect.TypeOf(Limits{}).Field(f.index).Type
		if f.Kind == LimitDuration {
			t = reflect.TypeOf(int64(0))
		}
		jf = append(jf, reflect.StructField{Name: f.Field, Type: t, Tag: reflect.StructTag(`json:"` + f.JSON + `,omitempty"`)})
	}
	return reflect.StructOf(jf)
}

func (f LimitField) value(l *Limits) reflect.Value { return reflect.ValueOf(l).Elem().Field(f.index) }

// Ptr returns a pointer to f's field in l (*time.Duration, *int64, *int or
// *float64), for decoders.
func (f LimitField) Ptr(l *Limits) any { return f.value(l).Addr().Interface() }

// IsSet reports whether l sets f: zero or less means "not set".
func (f LimitField) IsSet(l *Limits) bool {
	v := f.value(l)
	if v.CanFloat() {
		return v.Float() > 0
	}
	return v.Int() > 0
}

// Stricter reports whether a's f is stricter (smaller) than b's.
func (f LimitField) Stricter(a, b *Limits) bool {
	va, vb := f.value(a), f.value(b)
	if va.CanFloat() {
		return va.Float() < vb.Float()
	}
	return va.Int() < vb.Int()
}

// Copy sets dst's f to src's.
func (f LimitField) Copy(dst, src *Limits) { f.value(dst).Set(f.value(src)) }

// WithDefaults returns l with every zero field taken from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	for _, f := range LimitFields {
		if f.IsSet(&l) {
			f.Copy(&d, &l)
		}
	}
	return d
}

// SandboxLimits are the limits a sandbox is created with and cannot change
// afterwards: memory, pids, CPUs and the tmpfs sizes. A job fits a sandbox
// exactly when its Sandbox() equals the sandbox's.
type SandboxLimits struct {
	MemoryBytes  int64
	Pids         int64
	CPUs         float64
	WorkdirBytes int64 // tmpfs size of /work
	TmpBytes     int64 // tmpfs size of /tmp
}

// Sandbox returns the sandbox-wide part of l, defaults applied.
func (l Limits) Sandbox() SandboxLimits {
	l = l.WithDefaults()
	var s SandboxLimits
	sv := reflect.ValueOf(&s).Elem()
	for _, f := range LimitFields {
		if f.Sandbox {
			sv.FieldByName(f.Field).Set(f.value(&l))
		}
	}
	return s
}

// WithSandbox returns l with its sandbox-wide part replaced by s.
func (l Limits) WithSandbox(s SandboxLimits) Limits {
	sv := reflect.ValueOf(s)
	for _, f := range LimitFields {
		if f.Sandbox {
			f.value(&l).Set(sv.FieldByName(f.Field))
		}
	}
	return l
}

// Limits returns s as Limits whose per-job fields are zero.
func (s SandboxLimits) Limits() Limits { return Limits{}.WithSandbox(s) }

// Map is the JSON form as a map (the run result's limits in the API): the
// keys and values MarshalJSON writes, without encoding and decoding them.
func (l Limits) Map() map[string]any {
	m := make(map[string]any, len(LimitFields))
	for _, f := range LimitFields {
		v := f.value(&l)
		if v.IsZero() {
			continue
		}
		if f.Kind == LimitDuration {
			if ms := v.Interface().(time.Duration).Milliseconds(); ms != 0 {
				m[f.JSON] = ms
			}
			continue
		}
		m[f.JSON] = v.Interface()
	}
	return m
}

// MarshalJSON writes Limits as in audit records and `skillbox run --json`:
// the timeout in milliseconds, which is what people read, and zero values
// omitted.
func (l Limits) MarshalJSON() ([]byte, error) {
	j := reflect.New(limitsJSONType).Elem()
	for i, f := range LimitFields {
		v := f.value(&l)
		if f.Kind == LimitDuration {
			j.Field(i).SetInt(v.Interface().(time.Duration).Milliseconds())
			continue
		}
		j.Field(i).Set(v)
	}
	return json.Marshal(j.Interface())
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (l *Limits) UnmarshalJSON(b []byte) error {
	j := reflect.New(limitsJSONType)
	if err := json.Unmarshal(b, j.Interface()); err != nil {
		return err
	}
	var out Limits
	for i, f := range LimitFields {
		v := j.Elem().Field(i)
		if f.Kind == LimitDuration {
			f.value(&out).SetInt(int64(time.Duration(v.Int()) * time.Millisecond))
			continue
		}
		f.value(&out).Set(v)
	}
	*l = out
	return nil
}
