package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DuplicateKey finds the first object in data that holds the same member
// name twice, and returns where it is ("params.env"; "" for the top-level
// object) and the name as sent. data must be valid JSON (check json.Valid
// first); on other input the answer means nothing, but it does not panic.
//
// encoding/json keeps the last of two equal names, and matches struct
// fields regardless of case, so a request could show a reviewer (a log, a
// proxy, an approver reading the raw params) one value and run another.
// Every front end (the socket's JSON-RPC, MCP) refuses such a message
// before decoding it, with this one scan. Names are compared after
// unescaping and, because of that case insensitivity, ignoring case. One
// pass, no allocation for objects without escaped names and with at most a
// few members.
func DuplicateKey(data []byte) (where, name string, found bool) {
	type frame struct {
		obj       bool
		expectKey bool
		index     int
		key       string   // the member being read (objects)
		small     []string // folded names while there are few
		many      map[string]struct{}
	}
	var stack []frame
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{':
			stack = append(stack, frame{obj: true, expectKey: true})
		case '[':
			stack = append(stack, frame{})
		case '}', ']':
			if len(stack) == 0 {
				return "", "", false // not valid JSON
			}
			stack = stack[:len(stack)-1]
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].obj {
					stack[n-1].expectKey = true
				} else {
					stack[n-1].index++
				}
			}
		case '"':
			start := i
			i = stringEnd(data, i+1)
			if i >= len(data) {
				return "", "", false // an unterminated string: not valid JSON
			}
			n := len(stack)
			if n == 0 || !stack[n-1].obj || !stack[n-1].expectKey {
				continue
			}
			f := &stack[n-1]
			f.expectKey = false
			key := string(data[start+1 : i])
			if bytes.IndexByte(data[start+1:i], '\\') >= 0 {
				if err := json.Unmarshal(data[start:i+1], &key); err != nil {
					continue // cannot happen for valid JSON
				}
			}
			f.key = key
			folded := foldKey(key)
			dup := false
			if f.many != nil {
				_, dup = f.many[folded]
				f.many[folded] = struct{}{}
			} else {
				for _, k := range f.small {
					if k == folded {
						dup = true
						break
					}
				}
				f.small = append(f.small, folded)
				if len(f.small) > 16 {
					f.many = make(map[string]struct{}, 2*len(f.small))
					for _, k := range f.small {
						f.many[k] = struct{}{}
					}
					f.small = nil
				}
			}
			if dup {
				var b strings.Builder
				for j := range stack[:n-1] {
					fr := &stack[j]
					switch {
					case fr.obj && j == 0:
						b.WriteString(fr.key)
					case fr.obj:
						b.WriteString("." + fr.key)
					default:
						b.WriteString("[" + strconv.Itoa(fr.index) + "]")
					}
				}
				return b.String(), key, true
			}
		}
	}
	return "", "", false
}

// stringEnd returns the index of the quote that ends the JSON string whose
// contents start at i (data is valid JSON), skipping escaped quotes.
func stringEnd(data []byte, i int) int {
	for {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return len(data)
		}
		i += q
		n := 0 // backslashes right before the quote
		for j := i - 1; j >= 0 && data[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return i
		}
		i++
	}
}

// foldKey is the form under which two member names count as the same:
// foldKey(x) == foldKey(y) exactly when bytes.EqualFold(x, y), which is
// how encoding/json matches names to struct fields.
func foldKey(s string) string {
	ascii, upper := true, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
		upper = upper || ('a' <= c && c <= 'z')
	}
	if ascii && !upper {
		return s
	}
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			out = append(out, byte(r))
			continue
		}
		// The smallest rune of r's case-folding orbit.
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}
