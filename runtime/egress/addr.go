package egress

import "net/netip"

// special are the address ranges a name rule does not reach unless it is
// marked !private, or an IP/CIDR rule names the address: what lets code in
// a sandbox reach the host, its network, or a cloud's metadata service.
var special = []struct {
	pfx    netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // and 255.255.255.255
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private"}, // ULA
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("64:ff9b::/96"), "nat64"}, // reaches any IPv4 address, private ones too
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"}, // embeds an IPv4 address
	{netip.MustParsePrefix("2001::/32"), "teredo"},
}

// specialReason says why a is not an ordinary public address ("loopback",
// "private", "metadata", ...), or "" when it is one. IPv4-mapped IPv6
// addresses are judged as the IPv4 address they carry.
func specialReason(a netip.Addr) string {
	a = a.Unmap()
	for _, s := range special {
		if s.pfx.Contains(a) {
			return s.reason
		}
	}
	return ""
}
