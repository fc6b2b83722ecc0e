package profiles

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr bool
	}{
		{"0", 0, false},
		{"1024", 1024, false},
		{"1024k", 1 << 20, false},
		{"512m", 512 << 20, false},
		{"512M", 512 << 20, false},
		{"512MiB", 512 << 20, false},
		{"512mb", 512 << 20, false},
		{"2g", 2 << 30, false},
		{" 1t ", 1 << 40, false},
		{"1.5g", 3 << 29, false},
		{"", 0, true},
		{"m", 0, true},
		{"-1m", 0, true},
		{"12x", 0, true},
		{"1..5m", 0, true},
		{"9999999999999t", 0, true},
		{"99999999999999999999", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseSize(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidValue) || !strings.Contains(err.Error(), `"`+tt.in+`"`) {
				t.Errorf("ParseSize(%q) error = %v, want ErrInvalidValue naming the value", tt.in, err)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("ParseSize(%q): got %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"}, {1000, "1000"}, {1024, "1k"}, {512 << 20, "512m"}, {2 << 30, "2g"}, {1536 << 20, "1536m"}, {1 << 40, "1t"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Size(%d).String(): got %v, want %v", int64(tt.in), got, tt.want)
		}
		back, err := ParseSize(tt.in.String())
		if err != nil || back != tt.in {
			t.Errorf("ParseSize(%q): got %v, %v, want %v", tt.in.String(), back, err, tt.in)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"30", 30 * time.Second, false},
		{"30s", 30 * time.Second, false},
		{"10m", 10 * time.Minute, false},
		{"1h30m", 90 * time.Minute, false},
		{"0", 0, false},
		{"", 0, true},
		{"ten", 0, true},
		{"10 minutes", 0, true},
		{"99999999999999", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDuration(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && got.Std() != tt.want {
			t.Errorf("ParseDuration(%q): got %v, want %v", tt.in, got.Std(), tt.want)
		}
	}
}

func TestDurationString(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"}, {30 * time.Second, "30s"}, {10 * time.Minute, "10m"}, {24 * time.Hour, "24h"}, {90 * time.Second, "1m30s"}, {1500 * time.Millisecond, "1.5s"},
	}
	for _, tt := range tests {
		if got := Duration(tt.in).String(); got != tt.want {
			t.Errorf("Duration(%v).String(): got %v, want %v", tt.in, got, tt.want)
		}
	}
}
