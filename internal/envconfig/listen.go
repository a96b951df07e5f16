package envconfig

import (
	"fmt"
	"net"
	"net/netip"
)

// Loopback reports whether a listener on addr ("host:port") accepts
// connections from this host only: a host of localhost, 127.0.0.0/8 or ::1.
// An empty host, 0.0.0.0 or :: listens on every interface, and any other
// name may resolve to an address reachable from elsewhere, so they are not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Guarded is a surface that moves money or jobs, served on a listener: a
// process must not offer it beyond loopback without a credential, unless
// the operator says so in OptOut. Whoever reaches the port could otherwise
// reset a provider's ledger or cancel charge jobs.
type Guarded struct {
	Surface    string // what is served, for the message: "River UI"
	AddrVar    string // the listener's variable, like HTTP_ADDR
	Addr       string // its value
	Credential string // the credential's variables, like PAYMENTSIM_ADMIN_TOKEN
	Protected  bool   // the credential is set
	OptOut     string // the variable that allows serving without it
	Allowed    bool   // OptOut is true
}

// Check fails when the surface would be open beyond loopback, naming the
// listener's variable, the credential's and the opt-out.
func (g Guarded) Check() error {
	if g.Protected || g.Allowed || Loopback(g.Addr) {
		return nil
	}
	return fmt.Errorf("%s=%q serves %s beyond loopback without %s: set %s, bind %s to 127.0.0.1, or set %s=true to serve it unauthenticated",
		g.AddrVar, g.Addr, g.Surface, g.Credential, g.Credential, g.AddrVar, g.OptOut)
}

// DebugAddr reads DEBUG_ADDR, the optional listener for Go's profiles
// (empty: off). Profiles have no credential and show code paths, memory and
// goroutines, so an address beyond loopback is refused unless
// ALLOW_UNAUTHENTICATED_DEBUG is true; from a container or a pod, a
// loopback listener is still reachable with docker exec or kubectl
// port-forward.
func (r *Reader) DebugAddr() string {
	addr := r.OptionalAddr("DEBUG_ADDR")
	allowed := r.OneOf("ALLOW_UNAUTHENTICATED_DEBUG", "false", "true", "false") == "true"
	if addr != "" && !allowed && !Loopback(addr) {
		r.fail("DEBUG_ADDR", addr, "listens beyond loopback, and Go's profiles have no credential: bind it to 127.0.0.1 (e.g. 127.0.0.1:6060), or set ALLOW_UNAUTHENTICATED_DEBUG=true")
	}
	return addr
}
