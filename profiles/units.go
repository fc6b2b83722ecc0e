package profiles

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-forge/forge/cgroups"
)

// Size is a number of bytes. In YAML and in FORGE_* variables it is written
// as an integer or with a binary unit: "1024", "1024k", "512m", "2g", "1t"
// (case-insensitive; "512MB" and "512MiB" mean the same as "512m").
type Size int64

// ParseSize parses a size such as "512m" (cgroups.ParseBytes: the same
// syntax as a request's memory limit). Errors name the value.
func ParseSize(s string) (Size, error) {
	n, err := cgroups.ParseBytes(s)
	switch {
	case errors.Is(err, cgroups.ErrSizeRange):
		return 0, fmt.Errorf("%w: size %q is out of range", ErrInvalidValue, s)
	case err != nil:
		return 0, fmt.Errorf("%w: %q is not a size (%v; want a number of bytes or a number with k, m, g or t, like \"512m\")", ErrInvalidValue, s, err)
	}
	return Size(n), nil
}

// String formats s with the largest unit that divides it exactly ("512m").
func (s Size) String() string { return cgroups.FormatMemory(int64(s)) }

// Bytes returns s as a plain int64.
func (s Size) Bytes() int64 { return int64(s) }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText implements encoding.TextMarshaler, so JSON shows "512m" too.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Size) UnmarshalYAML(n *yaml.Node) error { return unmarshalScalar(n, s.UnmarshalText) }

// MarshalYAML implements yaml.Marshaler.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

// Duration is a time.Duration written as "30s", "10m", "24h", or as an
// integer meaning seconds.
type Duration time.Duration

// ParseDuration parses "30s" or "30" (seconds). Errors name the value.
func ParseDuration(s string) (Duration, error) {
	in := strings.TrimSpace(s)
	if n, err := strconv.ParseInt(in, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("%w: duration %q is out of range", ErrInvalidValue, s)
		}
		return Duration(time.Duration(n) * time.Second), nil
	}
	d, err := time.ParseDuration(in)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a duration (want \"30s\", \"10m\", \"24h\" or seconds)", ErrInvalidValue, s)
	}
	return Duration(d), nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Seconds returns d in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

// String formats whole hours, minutes and seconds compactly ("10m", not
// "10m0s"); anything else as time.Duration does.
func (d Duration) String() string {
	td := time.Duration(d)
	switch {
	case td == 0:
		return "0s"
	case td%time.Hour == 0:
		return strconv.FormatInt(int64(td/time.Hour), 10) + "h"
	case td%time.Minute == 0:
		return strconv.FormatInt(int64(td/time.Minute), 10) + "m"
	default:
		return td.String()
	}
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error { return unmarshalScalar(n, d.UnmarshalText) }

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Network is execution.network. Its only valid value is "none" (YAML false,
// "none" or "false"); it is a type of its own so that `network: true` parses
// and then fails validation with an error that names the invariant, rather
// than being silently ignored.
type Network string

// NetworkNone is the only valid Network.
const NetworkNone Network = "none"

// UnmarshalText implements encoding.TextUnmarshaler. Anything other than
// false/none is kept verbatim for Validate to reject.
func (n *Network) UnmarshalText(b []byte) error {
	switch s := strings.ToLower(strings.TrimSpace(string(b))); s {
	case "false", "none", "no", "off", "0":
		*n = NetworkNone
	default:
		*n = Network(s)
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (n Network) MarshalText() ([]byte, error) { return []byte(n), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (n *Network) UnmarshalYAML(node *yaml.Node) error {
	return unmarshalScalar(node, n.UnmarshalText)
}

// MarshalYAML implements yaml.Marshaler; "none" is written as false.
func (n Network) MarshalYAML() (any, error) {
	if n == NetworkNone {
		return false, nil
	}
	return string(n), nil
}

func unmarshalScalar(n *yaml.Node, set func([]byte) error) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%w: line %d: want a scalar, got %s", ErrInvalidValue, n.Line, kindName(n.Kind))
	}
	return set([]byte(n.Value))
}
