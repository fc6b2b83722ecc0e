package cgroups

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/mcp-forge/forge/internal/lazyre"
)

const (
	memoryForms = "use a positive size in bytes or with a binary unit: 1048576, 1024k, 512m, 1.5g, 256M, 128mb, 2gib"
	cpuForms    = "use a positive number of CPUs such as 0.5, 1 or 2"
)

// Bounds: below MinCPUs the CFS quota would be under the kernel's 1 ms
// minimum; MaxCPUs keeps the quota arithmetic far from overflow.
const (
	CPUPeriod = 100000 // µs, the CFS default
	MinCPUs   = 0.01
	MaxCPUs   = 1024
)

var (
	sizeRE = lazyre.New(`^([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)$`)
	units  = map[string]int64{
		"": 1, "b": 1,
		"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
		"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
		"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
	}
)

// ErrSizeRange is ParseBytes' error for a size beyond int64 bytes.
var ErrSizeRange = errors.New("it is too large")

// ParseBytes parses a byte count: an integer or decimal with an optional
// binary unit, case-insensitive ("1048576", "1024k", "512m", "1.5g",
// "128mb", "2gib"). Zero is allowed; fractions of a byte are dropped. The
// error says what is wrong (ErrSizeRange when the size is too large). Memory
// limits and every size in forge's configuration are read this way.
func ParseBytes(s string) (int64, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	if len(in) > 64 {
		return 0, errors.New("it is too long")
	}
	if strings.HasPrefix(in, "-") {
		return 0, errors.New("it is negative")
	}
	m := sizeRE.FindStringSubmatch(in)
	if m == nil {
		return 0, errors.New("not a size")
	}
	unit, ok := units[m[2]]
	if !ok {
		return 0, errors.New("unknown unit " + strconv.Quote(m[2]))
	}
	num, _ := new(big.Rat).SetString(m[1]) // the regexp admits only decimals
	n := new(big.Int).Quo(num.Mul(num, new(big.Rat).SetInt64(unit)).Num(), num.Denom())
	if !n.IsInt64() {
		return 0, ErrSizeRange
	}
	return n.Int64(), nil
}

// ParseMemory parses a memory size as ParseBytes does ("1.5g" is 1610612736
// bytes); zero is refused.
func ParseMemory(s string) (int64, error) {
	bad := func(reason string) error {
		return &LimitError{Field: "memory", Value: s, Reason: reason + "; " + memoryForms}
	}
	n, err := ParseBytes(s)
	switch {
	case err != nil:
		return 0, bad(err.Error())
	case n == 0:
		return 0, bad("it is zero")
	}
	return n, nil
}

// FormatMemory writes n in the largest binary unit that divides it exactly:
// 536870912 → "512m", 1610612736 → "1536m", 1000 → "1000".
func FormatMemory(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseCPUs parses a CPU count, fractions allowed, between MinCPUs and MaxCPUs.
func ParseCPUs(s string) (float64, error) {
	bad := func(reason string) error {
		return &LimitError{Field: "cpus", Value: s, Reason: reason + "; " + cpuForms}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, bad("not a number")
	case f <= 0:
		return 0, bad("it is not positive")
	case f < MinCPUs:
		return 0, bad("below the minimum " + FormatCPUs(MinCPUs))
	case f > MaxCPUs:
		return 0, bad("above the maximum " + FormatCPUs(MaxCPUs))
	}
	return f, nil
}

// FormatCPUs writes a CPU count the way ParseCPUs reads it: 0.5 → "0.5".
func FormatCPUs(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
