package profiles

import "reflect"

// overlay sets each field of *base that o sets: a zero field (0, "", a nil
// list) inherits base's. Named profiles over execution.* and tenant
// overrides over server.tenants.default are read this way, so that a field
// added to either struct is inherited without more code.
func overlay[T any](base *T, o T) {
	b, v := reflect.ValueOf(base).Elem(), reflect.ValueOf(o)
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsZero() {
			b.Field(i).Set(f)
		}
	}
}
