package golden

import (
	"hash/fnv"
	"reflect"
	"time"
)

// Filled is a T with every field it can reach set, for a golden file that
// shows every key of an encoding: a string (or []byte) to its field's
// name, a number to one the name picks (a duration to that many times
// 10ms), a bool true, a slice to one element and a map to one entry (keyed
// by the name), a pointer to a filled value, a time to Time. A value depends only on the field's own name, not on where the
// field stands, so moving fields (into an embedded struct, say) leaves the
// value as it was.
func Filled[T any]() T {
	var v T
	fill(reflect.ValueOf(&v).Elem(), "Value", 0)
	return v
}

// Time is the time Filled gives every time.Time.
var Time = time.Date(2026, 12, 3, 9, 30, 0, 123000000, time.UTC)

// maxDepth bounds how deep Filled goes, for types that hold themselves.
const maxDepth = 6

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
	bytesType    = reflect.TypeFor[[]byte]()
)

func fill(v reflect.Value, name string, depth int) {
	if depth > maxDepth {
		return
	}
	switch v.Type() {
	case timeType:
		v.Set(reflect.ValueOf(Time))
		return
	case durationType:
		v.SetInt(int64(number(name)) * int64(10*time.Millisecond))
		return
	case bytesType:
		v.SetBytes([]byte(name))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(number(name)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(number(name)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(number(name)) / 4)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), name, depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), name, depth+1)
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), name, depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, name, depth+1)
		fill(e, name, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		if v.NumMethod() == 0 {
			v.Set(reflect.ValueOf(name))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), f.Name, depth+1)
			}
		}
	}
}

// number is a number from 1 to 99 that name picks: never zero, so that
// omitempty keeps the key, and small enough for any integer type.
func number(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()%99 + 1
}
