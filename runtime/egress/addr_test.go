package egress

import (
	"net/netip"
	"testing"
)

func TestSpecialReason(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", "loopback"}, {"::1", "loopback"}, {"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "private"}, {"172.16.0.1", "private"}, {"192.168.1.1", "private"}, {"fd12::1", "private"},
		{"169.254.169.254", "metadata"}, {"fd00:ec2::254", "metadata"}, {"169.254.1.1", "link-local"}, {"fe80::1", "link-local"},
		{"100.64.0.1", "cgnat"}, {"0.0.0.0", "unspecified"}, {"::", "unspecified"}, {"64:ff9b::a00:1", "nat64"},
		{"255.255.255.255", "reserved"}, {"224.0.0.1", "multicast"},
		{"151.101.0.223", ""}, {"2a04:4e42::223", ""}, {"8.8.8.8", ""},
	} {
		if got := specialReason(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("specialReason(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
