package proc

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

func TestDeadOwner(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	tests := []struct {
		name string
		want bool
	}{
		{fmt.Sprintf("%d-abc", os.Getpid()), false},  // this process
		{fmt.Sprintf("%d-abc", os.Getppid()), false}, // alive
		{fmt.Sprintf("%d-abc", dead), true},
		{"sb-abc", false}, // not a forge name
		{"0-abc", false},
		{"-1-abc", false},
		{"12345", false}, // no dash
	}
	for _, tc := range tests {
		if got := DeadOwner(tc.name); got != tc.want {
			t.Errorf("DeadOwner(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if Alive(0) || Alive(-1) {
		t.Errorf("Alive of pid 0 or -1: want false")
	}
}
