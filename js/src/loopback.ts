// Which hosts a bearer token may reach over plain http: this machine only.
// The rule is the Go client's (client/options.go, isLoopbackHost), so both
// kits refuse the same hosts. Internal: not one of the package's exports.
import { BlockList, isIPv4, isIPv6 } from 'node:net';

// ip.IsLoopback in Go: 127.0.0.0/8 and ::1, and 127/8 mapped into IPv6
// (::ffff:127.0.0.1), which BlockList matches against the IPv4 subnet.
const loopbackIPs = new BlockList();
loopbackIPs.addSubnet('127.0.0.0', 8, 'ipv4');
loopbackIPs.addAddress('::1', 'ipv6');

/**
 * isLoopbackHost reports whether host (a URL's hostname: a name, an IPv4
 * literal, or an IPv6 literal with or without brackets) is this machine:
 * "localhost" (RFC 6761 keeps it there) or a loopback IP literal. Other
 * names are never taken by their look: "127.0.0.1.nip.io" or "127.evil.com"
 * resolve wherever their owner likes, so they are remote.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (h.toLowerCase() === 'localhost') return true;
  if (isIPv4(h)) return loopbackIPs.check(h, 'ipv4');
  if (isIPv6(h)) return loopbackIPs.check(h, 'ipv6');
  return false;
}
