package cgroups

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"512m", 512 << 20},
		{"2g", 2 << 30},
		{"1024k", 1 << 20},
		{"1.5g", 3 << 29},
		{"256M", 256 << 20},
		{"128mb", 128 << 20},
		{"128MiB", 128 << 20},
		{"1048576", 1 << 20},
		{"100b", 100},
		{" 64m ", 64 << 20},
		{"1t", 1 << 40},
		{"0.5k", 512},
		{"1.0001k", 1024}, // fractions of a byte are dropped
		{"9223372036854775807", math.MaxInt64},
	}
	for _, tt := range tests {
		got, err := ParseMemory(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseMemoryErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"", "not a size"},
		{"0", "zero"},
		{"0m", "zero"},
		{"0.0001b", "zero"},
		{"-1", "negative"},
		{"-512m", "negative"},
		{"abc", "not a size"},
		{"12x", `unknown unit "x"`},
		{"1.2.3m", "not a size"},
		{".5g", "not a size"},
		{"1e9", "not a size"},
		{"5 gigs", `unknown unit "gigs"`},
		{"9223372036854775808", "too large"},
		{"8388608t", "too large"},
		{"99999999999999999999999g", "too large"},
		{strings.Repeat("9", 100), "too long"},
	}
	for _, tt := range tests {
		_, err := ParseMemory(tt.in)
		var le *LimitError
		if !errors.Is(err, ErrInvalidLimit) || !errors.As(err, &le) {
			t.Errorf("ParseMemory(%q): got %v, want a *LimitError", tt.in, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{`"` + tt.in + `"`, tt.reason, "512m", "1.5g"} {
			if !strings.Contains(msg, want) {
				t.Errorf("ParseMemory(%q): got %q, want it to contain %q", tt.in, msg, want)
			}
		}
	}
}

func TestFormatMemory(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{512 << 20, "512m"}, {1 << 30, "1g"}, {3 << 29, "1536m"}, {3072, "3k"}, {1536, "1536"}, {1000, "1000"}, {0, "0"}, {2 << 40, "2t"},
	}
	for _, tt := range tests {
		if got := FormatMemory(tt.in); got != tt.want {
			t.Errorf("FormatMemory(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in > 0 {
			if back, err := ParseMemory(tt.want); err != nil || back != tt.in {
				t.Errorf("ParseMemory(FormatMemory(%d)) = %d, %v", tt.in, back, err)
			}
		}
	}
}

func TestParseCPUs(t *testing.T) {
	good := map[string]float64{"0.5": 0.5, "1": 1, "2": 2, " 1.25 ": 1.25, "0.01": 0.01, "1024": 1024}
	for in, want := range good {
		if got, err := ParseCPUs(in); err != nil || got != want {
			t.Errorf("ParseCPUs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := []string{"", "0", "-1", "abc", "NaN", "Inf", "0.001", "1025", "1e400", "2 cpus"}
	for _, in := range bad {
		_, err := ParseCPUs(in)
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseCPUs(%q): got %v, want ErrInvalidLimit naming the value", in, err)
		}
	}
}

var profileMax = Limits{MemoryBytes: 1 << 30, CPUs: 1, Pids: 128}

func TestValidate(t *testing.T) {
	tests := []struct {
		l    Limits
		want string // "" for valid
	}{
		{profileMax, ""},
		{Limits{MemoryBytes: MinMemoryBytes, CPUs: 0.01, Pids: 1}, ""},
		{Limits{CPUs: 1, Pids: 1}, "memory"},
		{Limits{MemoryBytes: 1 << 20, CPUs: 1, Pids: 1}, `invalid memory limit "1m": below the minimum 4m`},
		{Limits{MemoryBytes: 1 << 30, Pids: 1}, "cpus"},
		{Limits{MemoryBytes: 1 << 30, CPUs: math.NaN(), Pids: 1}, "cpus"},
		{Limits{MemoryBytes: 1 << 30, CPUs: 1}, "pids"},
		{Limits{MemoryBytes: 1 << 30, CPUs: 1, Pids: -5}, `invalid pids limit "-5"`},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: got %v, want valid", tt.l, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want ErrInvalidLimit containing %q", tt.l, err, tt.want)
		}
	}
}

func TestTighten(t *testing.T) {
	tests := []struct {
		name    string
		req     Limits
		want    Limits
		wantErr string
		exceeds bool
	}{
		{"empty request keeps maxima", Limits{}, profileMax, "", false},
		{"lower memory", Limits{MemoryBytes: 256 << 20}, Limits{256 << 20, 1, 128}, "", false},
		{"lower all", Limits{64 << 20, 0.5, 16}, Limits{64 << 20, 0.5, 16}, "", false},
		{"equal is fine", profileMax, profileMax, "", false},
		{"memory above", Limits{MemoryBytes: 4 << 30}, Limits{}, "memory 4g exceeds the maximum 1g", true},
		{"cpus above", Limits{CPUs: 2}, Limits{}, "cpus 2 exceeds the maximum 1", true},
		{"pids above", Limits{Pids: 4096}, Limits{}, "pids 4096 exceeds the maximum 128", true},
		{"negative memory", Limits{MemoryBytes: -1}, Limits{}, "memory", false},
		{"negative cpus", Limits{CPUs: -1}, Limits{}, "cpus", false},
		{"tiny memory", Limits{MemoryBytes: 1024}, Limits{}, "below the minimum", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := profileMax.Tighten(tt.req)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want ErrInvalidLimit containing %q", err, tt.wantErr)
			}
			if errors.Is(err, ErrExceedsMaximum) != tt.exceeds {
				t.Errorf("errors.Is(err, ErrExceedsMaximum) = %v, want %v", !tt.exceeds, tt.exceeds)
			}
		})
	}
	if _, err := (Limits{}).Tighten(Limits{}); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("Tighten on invalid maxima: got %v, want ErrInvalidLimit", err)
	}
}

func TestSpec(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	got := Limits{MemoryBytes: 512 << 20, CPUs: 0.5, Pids: 64}.Spec()
	want := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(512 << 20), Swap: i64(512 << 20)},
		CPU:    &specs.LinuxCPU{Quota: i64(50000), Period: u64(100000)},
		Pids:   &specs.LinuxPids{Limit: i64(64)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&specs.LinuxResources{}, Limits{}.Spec()); diff != "" {
		t.Errorf("zero limits (-want +got):\n%s", diff)
	}
}

func FuzzParseMemory(f *testing.F) {
	for _, s := range []string{"512m", "1.5g", "0", "-1", "9223372036854775807", "1.0001k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseMemory(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("ParseMemory(%q): error %v is not ErrInvalidLimit", s, err)
			}
			return
		}
		if n <= 0 {
			t.Fatalf("ParseMemory(%q) = %d, want > 0", s, n)
		}
		if back, err := ParseMemory(FormatMemory(n)); err != nil || back != n {
			t.Fatalf("round trip of %d: %d, %v", n, back, err)
		}
	})
}
