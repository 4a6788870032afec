package policy

import (
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// body is one block's attributes with typed accessors that record problems.
type body struct {
	d      *decoder
	prefix string
	attrs  hcl.Attributes
}

func (d *decoder) body(b hcl.Body, prefix string, schema *hcl.BodySchema) (*body, hcl.Blocks) {
	content, ds := b.Content(schema)
	d.diags(prefix, ds)
	if content == nil {
		return &body{d: d, prefix: prefix}, nil
	}
	return &body{d: d, prefix: prefix, attrs: content.Attributes}, content.Blocks
}

func (b *body) field(name string) string {
	if b.prefix == "" {
		return name
	}
	return b.prefix + "." + name
}

func (b *body) bad(a *hcl.Attribute, format string, args ...any) {
	b.d.errorf(a.Expr.Range(), b.field(a.Name), format, args...)
}

// value evaluates an attribute with no variables or functions.
func (b *body) value(name string) (cty.Value, *hcl.Attribute) {
	a := b.attrs[name]
	if a == nil {
		return cty.NilVal, nil
	}
	v, ds := a.Expr.Value(nil)
	if b.d.diags(b.field(name), ds) {
		return cty.NilVal, nil
	}
	if v.IsNull() {
		b.bad(a, "must not be null")
		return cty.NilVal, nil
	}
	return v, a
}

func (b *body) str(name string, dst *string) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.String {
		b.bad(a, "must be a string, not %s", v.Type().FriendlyName())
		return nil
	}
	*dst = v.AsString()
	return a
}

func (b *body) strs(name string, dst *[]string) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	t := v.Type()
	if !t.IsTupleType() && !t.IsListType() && !t.IsSetType() {
		b.bad(a, "must be a list of strings, like [\"a\", \"b\"], not %s", t.FriendlyName())
		return nil
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.Type() != cty.String {
			b.bad(a, "must be a list of strings; element %d is %s", len(out)+1, e.Type().FriendlyName())
			return nil
		}
		out = append(out, e.AsString())
	}
	*dst = out
	return a
}

func (b *body) boolean(name string, dst *bool) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.Bool {
		b.bad(a, "must be true or false, not %s", v.Type().FriendlyName())
		return nil
	}
	*dst = v.True()
	return a
}

// integer reads a whole number that must be at least min.
func (b *body) integer(name string, min int64, dst *int64) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.Number {
		b.bad(a, "must be a whole number, not %s", v.Type().FriendlyName())
		return nil
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if !bf.IsInt() || acc != 0 {
		b.bad(a, "must be a whole number, not %s", bf.Text('g', -1))
		return nil
	}
	if n < min {
		b.bad(a, "must be at least %d, not %d", min, n)
		return nil
	}
	*dst = n
	return a
}

func (b *body) intField(name string, min int64, dst *int) {
	var n int64
	if b.integer(name, min, &n) != nil {
		*dst = int(n)
	}
}

func (b *body) float(name string, dst *float64) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.Number {
		b.bad(a, "must be a number, not %s", v.Type().FriendlyName())
		return nil
	}
	f, _ := v.AsBigFloat().Float64()
	if f <= 0 {
		b.bad(a, "must be greater than 0")
		return nil
	}
	*dst = f
	return a
}

// size reads a positive byte size given as a string with a unit or a number.
func (b *body) size(name string, dst *int64) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	var s string
	switch v.Type() {
	case cty.String:
		s = v.AsString()
	case cty.Number:
		s = v.AsBigFloat().Text('f', -1)
	default:
		b.bad(a, "must be a size like \"512MiB\" or a number of bytes, not %s", v.Type().FriendlyName())
		return nil
	}
	n, err := ParseSize(s)
	if err != nil {
		b.bad(a, "%v", err)
		return nil
	}
	if n <= 0 {
		b.bad(a, "must be greater than 0 bytes")
		return nil
	}
	*dst = n
	return a
}

// duration reads a positive Go duration string.
func (b *body) duration(name string, dst *time.Duration) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.String {
		b.bad(a, "must be a duration string like \"30s\" or \"5m\", not %s", v.Type().FriendlyName())
		return nil
	}
	dur, err := parseDuration(v.AsString())
	if err != nil {
		b.bad(a, "%v", err)
		return nil
	}
	if dur <= 0 {
		b.bad(a, "must be greater than 0")
		return nil
	}
	*dst = dur
	return a
}

// path reads a non-empty path, resolved against the config's directory.
func (b *body) path(name string, dst *string) *hcl.Attribute {
	var s string
	a := b.str(name, &s)
	if a == nil {
		return nil
	}
	if s == "" {
		b.bad(a, "must not be empty")
		return nil
	}
	*dst = b.d.resolve(s)
	return a
}

func (b *body) paths(name string, dst *[]string) *hcl.Attribute {
	var ss []string
	a := b.strs(name, &ss)
	if a == nil {
		return nil
	}
	for i, s := range ss {
		if s == "" {
			b.bad(a, "element %d is empty", i+1)
			return nil
		}
		ss[i] = b.d.resolve(s)
	}
	*dst = ss
	return a
}

func (b *body) oneOf(name string, dst *string, choices ...string) *hcl.Attribute {
	var s string
	a := b.str(name, &s)
	if a == nil {
		return nil
	}
	for _, c := range choices {
		if s == c {
			*dst = s
			return a
		}
	}
	b.bad(a, "unknown value %q: choose one of %s", s, strings.Join(choices, ", "))
	return nil
}
