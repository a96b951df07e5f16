package k8s

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// monitoringNamespace is the labels of the namespace Prometheus runs in, as
// the policies select it (networkpolicy.yaml says why this label).
var monitoringNamespace = labels.Set{"kubernetes.io/metadata.name": "monitoring"}

// dnsPods are the cluster's DNS servers, as the dns policy selects them.
var dnsPods = endpoint{ns: labels.Set{"kubernetes.io/metadata.name": "kube-system"}, pod: labels.Set{"k8s-app": "kube-dns"}}

// scraped are the Deployments whose /metrics must be open to the
// monitoring namespace and to no one else: the service this repository
// ships (the simulators stand in for outside systems).
var scraped = []string{"checkout", "worker"}

// endpoint is one end of a connection as network policies see it: a pod of
// a rendered workload, a pod of another namespace, or an address outside
// the cluster.
type endpoint struct {
	w        *workload
	ns       labels.Set // another namespace's labels; nil: this namespace
	pod      labels.Set // the pod's labels; nil: any pod
	external bool
}

func (e endpoint) String() string {
	switch {
	case e.w != nil:
		return e.w.String()
	case e.external:
		return "outside the cluster"
	default:
		return fmt.Sprintf("pods %v of namespace %v", e.pod, e.ns)
	}
}

// rule is an ingress or egress rule: traffic to or from peers (none: every
// one) on ports (none: every port).
type rule struct {
	policy string
	peers  []networkingv1.NetworkPolicyPeer
	ports  []networkingv1.NetworkPolicyPort
}

func (r rule) matches(e endpoint, port corev1.ContainerPort) bool {
	return (len(r.peers) == 0 || slices.ContainsFunc(r.peers, func(p networkingv1.NetworkPolicyPeer) bool { return peerMatches(p, e) })) &&
		(len(r.ports) == 0 || slices.ContainsFunc(r.ports, func(pp networkingv1.NetworkPolicyPort) bool { return policyPortMatches(pp, port) }))
}

// rules returns the ingress (or egress) rules of the policies that select
// w's pods, and whether any policy isolates them in that direction: an
// isolated pod takes or makes only the connections a rule allows.
func (c *checker) rules(w workload, ingress bool) (rs []rule, isolated bool) {
	for _, p := range c.m.policies {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(w.pod.Labels)) {
			continue
		}
		in, out := policyTypes(p)
		switch {
		case ingress && in:
			isolated = true
			for _, r := range p.Spec.Ingress {
				rs = append(rs, rule{policy: p.Name, peers: r.From, ports: r.Ports})
			}
		case !ingress && out:
			isolated = true
			for _, r := range p.Spec.Egress {
				rs = append(rs, rule{policy: p.Name, peers: r.To, ports: r.Ports})
			}
		}
	}
	return rs, isolated
}

// policyTypes applies the API's default: Ingress always, Egress when the
// policy has egress rules.
func policyTypes(p *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(p.Spec.PolicyTypes) == 0 {
		return true, len(p.Spec.Egress) > 0
	}
	return slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress), slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

// admits reports whether the egress policies of from and the ingress
// policies of to allow a connection to port of to.
func (c *checker) admits(from, to endpoint, port corev1.ContainerPort) (out, in bool) {
	out, in = true, true
	if from.w != nil {
		rs, isolated := c.rules(*from.w, false)
		out = !isolated || slices.ContainsFunc(rs, func(r rule) bool { return r.matches(to, port) })
	}
	if to.w != nil {
		rs, isolated := c.rules(*to.w, true)
		in = !isolated || slices.ContainsFunc(rs, func(r rule) bool { return r.matches(from, port) })
	}
	return out, in
}

// peerMatches reports whether a policy peer covers e. The labels of the
// rendered namespace are unknown (the base has none), so only an empty
// namespaceSelector is taken to cover this namespace's pods.
func peerMatches(p networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if p.IPBlock != nil {
		return e.external
	}
	if e.external {
		return false
	}
	if p.NamespaceSelector == nil {
		if e.ns != nil {
			return false
		}
	} else {
		nsSel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
		if err != nil {
			return false
		}
		if e.ns == nil && !nsSel.Empty() || e.ns != nil && !nsSel.Matches(e.ns) {
			return false
		}
	}
	if p.PodSelector == nil {
		return true
	}
	podSel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
	if err != nil {
		return false
	}
	if e.w != nil {
		return podSel.Matches(labels.Set(e.w.pod.Labels))
	}
	return podSel.Matches(e.pod)
}

func policyPortMatches(pp networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	proto, cpProto := corev1.ProtocolTCP, corev1.ProtocolTCP
	if pp.Protocol != nil {
		proto = *pp.Protocol
	}
	if cp.Protocol != "" {
		cpProto = cp.Protocol
	}
	switch {
	case proto != cpProto:
		return false
	case pp.Port == nil:
		return true
	case pp.Port.Type == intstr.String:
		return pp.Port.StrVal == cp.Name
	case pp.EndPort != nil:
		return cp.ContainerPort >= pp.Port.IntVal && cp.ContainerPort <= *pp.EndPort
	default:
		return pp.Port.IntVal == cp.ContainerPort
	}
}

// containerPort finds the port of w's containers that p names or numbers.
func containerPort(w workload, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, ctr := range w.pod.Spec.Containers {
		for _, cp := range ctr.Ports {
			if portMatches(p, cp) {
				return cp, true
			}
		}
	}
	return corev1.ContainerPort{}, false
}

// checkNetworkPolicies requires a default deny, an allow policy for every
// workload, policy ports that exist, Services and dependencies reachable,
// the database reachable from its clients only, and metrics reachable from
// the monitoring namespace only.
func (c *checker) checkNetworkPolicies() {
	c.checkDefaultDeny()
	c.checkPolicyPorts()
	for i := range c.m.workloads {
		w := &c.m.workloads[i]
		in, _ := c.rules(*w, true)
		out, _ := c.rules(*w, false)
		if len(in) == 0 && len(out) == 0 {
			c.fail(w, "no NetworkPolicy allows its pods any traffic: under the default deny they can neither take nor make a connection")
		}
		if slices.ContainsFunc(w.pod.Spec.Containers, func(ctr corev1.Container) bool {
			return slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == 5432 })
		}) {
			c.checkDatabaseIngress(w)
		}
		c.checkScrape(w)
		if app, ok := apps[w.name]; ok && w.kind == "Deployment" {
			c.checkDependencies(w, c.f.binaries[app.target])
		}
	}
	c.checkServiceIngress()
}

func (c *checker) checkDefaultDeny() {
	for _, p := range c.m.policies {
		in, out := policyTypes(p)
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			in && out && len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 {
			return
		}
	}
	c.errs = append(c.errs, fmt.Errorf("no default-deny NetworkPolicy (empty podSelector, policyTypes Ingress and Egress, no rules): a pod no policy selects takes and makes any connection"))
}

// checkPolicyPorts requires every policy to select pods and every port it
// names to be a port of the pods it names: a policy on a port nothing
// listens on opens nothing and hides the port that needed it.
func (c *checker) checkPolicyPorts() {
	for _, p := range c.m.policies {
		where := place("NetworkPolicy " + p.Name)
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			c.fail(where, "podSelector: %v", err)
			continue
		}
		pods := c.selected(sel)
		if len(pods) == 0 {
			c.fail(where, "selects no pods")
		}
		for _, r := range p.Spec.Ingress {
			for _, pp := range r.Ports {
				for _, w := range pods {
					if pp.Port != nil && !slices.ContainsFunc(w.pod.Spec.Containers, func(ctr corev1.Container) bool {
						return slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return policyPortMatches(pp, cp) })
					}) {
						c.fail(where, "ingress port %s is not a container port of %s", pp.Port.String(), w)
					}
				}
			}
		}
		for _, r := range p.Spec.Egress {
			for _, peer := range r.To {
				if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil {
					continue // pods outside the rendered manifests
				}
				sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err != nil {
					c.fail(where, "egress podSelector: %v", err)
					continue
				}
				dsts := c.selected(sel)
				if len(dsts) == 0 {
					c.fail(where, "egress to %s, which selects no pods", sel)
				}
				for _, pp := range r.Ports {
					for _, w := range dsts {
						if pp.Port != nil && !slices.ContainsFunc(w.pod.Spec.Containers, func(ctr corev1.Container) bool {
							return slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return policyPortMatches(pp, cp) })
						}) {
							c.fail(where, "egress port %s is not a container port of %s, which the rule names", pp.Port.String(), w)
						}
					}
				}
			}
		}
	}
}

// checkServiceIngress requires each Service's target ports to be admitted
// by some ingress rule: a Service nothing may connect to is dead.
func (c *checker) checkServiceIngress() {
	for _, s := range c.m.services {
		for _, w := range c.selected(labels.SelectorFromSet(s.Spec.Selector)) {
			for _, sp := range s.Spec.Ports {
				cp, ok := containerPort(w, sp.TargetPort)
				if !ok {
					continue // checkServices reported it
				}
				rs, isolated := c.rules(w, true)
				if isolated && !slices.ContainsFunc(rs, func(r rule) bool {
					return len(r.ports) == 0 || slices.ContainsFunc(r.ports, func(pp networkingv1.NetworkPolicyPort) bool { return policyPortMatches(pp, cp) })
				}) {
					c.fail(place("Service "+s.Name), "port %d reaches %s port %d, which no NetworkPolicy ingress rule admits", sp.Port, w, cp.ContainerPort)
				}
			}
		}
	}
}

// checkDependencies requires the policies to let w reach what its
// settings name: DNS, the database, the provider, the catalog.
func (c *checker) checkDependencies(w *workload, b *binary) {
	if !b.reads("DATABASE_URL") && !b.reads("STRIPE_API_BASE") {
		return // calls nothing
	}
	src := endpoint{w: w}
	if out, _ := c.admits(src, dnsPods, corev1.ContainerPort{ContainerPort: 53, Protocol: corev1.ProtocolUDP}); !out {
		c.fail(w, "no NetworkPolicy egress allows DNS (UDP 53 to %s): it cannot resolve the names it calls", dnsPods)
	}
	quiet := &checker{m: c.m, f: c.f, externalSecrets: true}
	env := quiet.environment(place(w.String()), w.pod.Spec.Containers[0])
	for _, name := range []string{"DATABASE_URL", "STRIPE_API_BASE", "CATALOG_URL"} {
		raw := env[name].value
		if raw == "" {
			continue // unset, or in a Secret this directory does not render
		}
		u, err := url.Parse(raw)
		if err != nil {
			continue // checkURL reported it
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "postgres": "5432", "postgresql": "5432"}[u.Scheme]
		}
		n, _ := strconv.Atoi(port)
		host := u.Hostname()
		if strings.Contains(host, ".") {
			if out, _ := c.admits(src, endpoint{external: true}, corev1.ContainerPort{ContainerPort: int32(n)}); !out {
				c.fail(w, "%s %s: no NetworkPolicy egress allows port %d outside the cluster", name, u.Host, n)
			}
			continue
		}
		for _, s := range c.m.services {
			if s.Name != host {
				continue
			}
			for _, sp := range s.Spec.Ports {
				if int(sp.Port) != n {
					continue
				}
				for _, dst := range c.selected(labels.SelectorFromSet(s.Spec.Selector)) {
					cp, ok := containerPort(dst, sp.TargetPort)
					if !ok {
						continue
					}
					out, in := c.admits(src, endpoint{w: &dst}, cp)
					if !out {
						c.fail(w, "%s %s: no NetworkPolicy egress from its pods allows %s port %d", name, u.Host, dst, cp.ContainerPort)
					}
					if !in {
						c.fail(w, "%s %s: no NetworkPolicy ingress of %s admits it on port %d", name, u.Host, dst, cp.ContainerPort)
					}
				}
			}
		}
	}
}

// checkDatabaseIngress requires the database to take connections only from
// pods that use it: a peer must select pods of this namespace by label, and
// every workload it selects must set DATABASE_URL.
func (c *checker) checkDatabaseIngress(db *workload) {
	rs, isolated := c.rules(*db, true)
	if !isolated {
		c.fail(db, "no NetworkPolicy isolates its ingress: every pod in the cluster reaches the database")
		return
	}
	cp, _ := containerPort(*db, intstr.FromInt32(5432))
	for _, r := range rs {
		if len(r.ports) > 0 && !slices.ContainsFunc(r.ports, func(pp networkingv1.NetworkPolicyPort) bool { return policyPortMatches(pp, cp) }) {
			continue // a rule for another port
		}
		if len(r.peers) == 0 {
			c.fail(place("NetworkPolicy "+r.policy), "admits %s port 5432 from every source, want only the pods that use the database (checkout, worker and their migrations)", db)
			continue
		}
		for _, p := range r.peers {
			if p.IPBlock != nil || p.NamespaceSelector != nil || p.PodSelector == nil ||
				len(p.PodSelector.MatchLabels) == 0 && len(p.PodSelector.MatchExpressions) == 0 {
				c.fail(place("NetworkPolicy "+r.policy), "admits %s port 5432 from %s, want only the pods that use the database (checkout, worker and their migrations)", db, describePeer(p))
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
			if err != nil {
				continue
			}
			for _, w := range c.selected(sel) {
				if !c.usesDatabase(w) {
					c.fail(place("NetworkPolicy "+r.policy), "admits %s port 5432 from %s, which does not use the database", db, w)
				}
			}
		}
	}
}

func (c *checker) usesDatabase(w workload) bool {
	quiet := &checker{m: c.m, f: c.f, externalSecrets: true}
	all := append(slices.Clone(w.pod.Spec.InitContainers), w.pod.Spec.Containers...)
	return slices.ContainsFunc(all, func(ctr corev1.Container) bool {
		_, ok := quiet.environment(place(w.String()), ctr)["DATABASE_URL"]
		return ok
	})
}

func describePeer(p networkingv1.NetworkPolicyPeer) string {
	var parts []string
	if p.IPBlock != nil {
		parts = append(parts, "ipBlock "+p.IPBlock.CIDR)
	}
	if p.NamespaceSelector != nil {
		parts = append(parts, "namespaceSelector "+metav1.FormatLabelSelector(p.NamespaceSelector))
	}
	if p.PodSelector != nil {
		parts = append(parts, "podSelector "+metav1.FormatLabelSelector(p.PodSelector))
	}
	return strings.Join(parts, ", ")
}

// checkScrape requires the port /metrics is served on to be admitted from
// the monitoring namespace, and, for the service's own Deployments, from
// nowhere else; the scrape annotations must name that port.
func (c *checker) checkScrape(w *workload) {
	if len(w.pod.Spec.Containers) == 0 {
		return
	}
	var metrics *corev1.ContainerPort
	if slices.Contains(scraped, w.name) && w.kind == "Deployment" {
		b := c.f.binaries[apps[w.name].target]
		quiet := &checker{m: c.m, f: c.f, externalSecrets: true}
		env := quiet.environment(place(w.String()), w.pod.Spec.Containers[0])
		variable := "HTTP_ADDR"
		if b.reads("METRICS_ADDR") && env["METRICS_ADDR"].value != "" {
			variable = "METRICS_ADDR"
		}
		addr, ok := env[variable]
		if !ok {
			addr.value = b.vars[variable]
		}
		_, port, err := net.SplitHostPort(addr.value)
		if err != nil {
			return // checkApp reported it
		}
		n, _ := strconv.Atoi(port)
		cp, ok := containerPort(*w, intstr.FromInt32(int32(n)))
		if !ok {
			c.fail(w, "%s %q listens on %s, which no container port exposes", variable, addr.value, port)
			return
		}
		metrics = &cp
		c.checkMetricsOnlyFromMonitoring(w, cp)
		if got := w.pod.Annotations["prometheus.io/port"]; got != port || w.pod.Annotations["prometheus.io/scrape"] != "true" {
			c.fail(w, "annotations prometheus.io/scrape %q, prometheus.io/port %q: want \"true\" and %s, the port /metrics is served on (%s)",
				w.pod.Annotations["prometheus.io/scrape"], got, port, variable)
		}
	}
	if w.pod.Annotations["prometheus.io/scrape"] != "true" {
		return
	}
	if metrics == nil {
		n, err := strconv.Atoi(w.pod.Annotations["prometheus.io/port"])
		cp, ok := containerPort(*w, intstr.FromInt32(int32(n)))
		if err != nil || !ok {
			c.fail(w, "prometheus.io/port %q is not a container port", w.pod.Annotations["prometheus.io/port"])
			return
		}
		metrics = &cp
	}
	if _, in := c.admits(endpoint{ns: monitoringNamespace}, endpoint{w: w}, *metrics); !in {
		c.fail(w, "metrics port %d is not admitted from the monitoring namespace (%v): Prometheus cannot scrape it", metrics.ContainerPort, monitoringNamespace)
	}
}

func (c *checker) checkMetricsOnlyFromMonitoring(w *workload, cp corev1.ContainerPort) {
	rs, isolated := c.rules(*w, true)
	if !isolated {
		c.fail(w, "metrics port %d is admitted from everywhere: no NetworkPolicy isolates its ingress", cp.ContainerPort)
		return
	}
	for _, r := range rs {
		if len(r.ports) > 0 && !slices.ContainsFunc(r.ports, func(pp networkingv1.NetworkPolicyPort) bool { return policyPortMatches(pp, cp) }) {
			continue
		}
		if len(r.peers) == 0 {
			c.fail(w, "metrics port %d is admitted from every source (NetworkPolicy %s), want only the monitoring namespace", cp.ContainerPort, r.policy)
			continue
		}
		for _, p := range r.peers {
			if p.IPBlock != nil || p.NamespaceSelector == nil || !monitoringOnly(p) {
				c.fail(w, "metrics port %d is admitted from %s (NetworkPolicy %s), want only the monitoring namespace", cp.ContainerPort, describePeer(p), r.policy)
			}
		}
	}
}

// monitoringOnly reports whether p selects the monitoring namespace by a
// label that no other namespace has.
func monitoringOnly(p networkingv1.NetworkPolicyPeer) bool {
	sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
	return err == nil && sel.Matches(monitoringNamespace) && !sel.Matches(labels.Set{"kubernetes.io/metadata.name": "checkout-demo"}) &&
		p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == monitoringNamespace["kubernetes.io/metadata.name"]
}
