package pod

import (
	"context"
	"fmt"
	"net"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/runner"
)

// networkpolicies: a Restricted Loop's egress policy (LOOP-egress, owned by the Loop).
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;update;delete

// Egress is the operator's side of spec.runner.network.
type Egress struct {
	// Default is the mode of a Loop that sets none ("": Restricted for a
	// Loop that runs an agent when there is a model gateway, else
	// Unrestricted).
	Default v1alpha1.EgressMode
	// GatewayNamespace and GatewayLabels select the gateway's Pods, and
	// GatewayPort is their port: a Restricted Loop's Pods may reach them.
	GatewayNamespace string
	GatewayLabels    map[string]string
	GatewayPort      int32
}

// EgressName is the NetworkPolicy of a Restricted Loop.
func EgressName(loop string) string { return loop + "-egress" }

// EgressMode is where the Loop's Pods may connect to.
func (o Options) EgressMode(loop *v1alpha1.Loop) v1alpha1.EgressMode {
	if rs := loop.Spec.Runner; rs != nil && rs.Network != nil && rs.Network.Egress != "" {
		return rs.Network.Egress
	}
	if o.Egress.Default != "" {
		return o.Egress.Default
	}
	if o.Gateway != nil && runsAgent(&loop.Spec) {
		return v1alpha1.EgressRestricted
	}
	return v1alpha1.EgressUnrestricted
}

// runsAgent says whether a Loop has a state that runs the agent.
func runsAgent(spec *v1alpha1.LoopSpec) bool {
	if spec.Agent != nil {
		return true
	}
	for _, st := range spec.States {
		if st.IsAgent() || st.Learning != nil {
			return true
		}
	}
	return false
}

// EgressPolicy is the NetworkPolicy of a Restricted Loop: its Pods may
// reach the model gateway, DNS, and what spec.runner.network.allow lists.
// A CIDR that does not parse refuses the Loop's actions.
func (o Options) EgressPolicy(loop *v1alpha1.Loop) (*networkingv1.NetworkPolicy, error) {
	tcp, udp := ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP)
	dns := intstr.FromInt32(53)
	rules := []networkingv1.NetworkPolicyEgressRule{{
		// DNS, wherever the cluster serves it.
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: udp, Port: &dns}, {Protocol: tcp, Port: &dns}},
	}}
	if o.Gateway != nil && o.Egress.GatewayNamespace != "" && len(o.Egress.GatewayLabels) > 0 {
		r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: o.Egress.GatewayNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: o.Egress.GatewayLabels},
		}}}
		if o.Egress.GatewayPort > 0 {
			p := intstr.FromInt32(o.Egress.GatewayPort)
			r.Ports = []networkingv1.NetworkPolicyPort{{Protocol: tcp, Port: &p}}
		}
		rules = append(rules, r)
	}
	if rs := loop.Spec.Runner; rs != nil && rs.Network != nil {
		for i, a := range rs.Network.Allow {
			_, block, err := net.ParseCIDR(a.CIDR)
			if err != nil {
				return nil, &runner.Refused{Reason: "InvalidEgress", Message: fmt.Sprintf("spec.runner.network.allow[%d].cidr: %q is not an address block (e.g. 10.0.12.7/32)", i, a.CIDR)}
			}
			r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: block.String()}}}}
			for _, p := range a.Ports {
				port := intstr.FromInt32(p)
				r.Ports = append(r.Ports, networkingv1.NetworkPolicyPort{Protocol: tcp, Port: &port})
			}
			rules = append(rules, r)
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: EgressName(loop.Name), Namespace: loop.Namespace, Labels: v1alpha1.ChildLabels(loop),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(loop, v1alpha1.GroupVersion.WithKind("Loop"))}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelLoop: v1alpha1.LabelValue(loop.Name)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      rules,
		},
	}, nil
}

// egressApplied remembers, per Loop, the generation whose policy is in
// place, so a step costs no API call for it.
type egressApplied struct{ m sync.Map }

type egressKey struct {
	uid        types.UID
	generation int64
}

// ensureEgress puts the Loop's egress policy in place before its Pods run:
// made or brought up to date when Restricted, deleted when Unrestricted.
func (r *Runner) ensureEgress(ctx context.Context, loop *v1alpha1.Loop) error {
	key := client.ObjectKeyFromObject(loop)
	done := egressKey{loop.UID, loop.Generation}
	if v, ok := r.egress.m.Load(key); ok && v == done {
		return nil
	}
	existing := &networkingv1.NetworkPolicy{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: loop.Namespace, Name: EgressName(loop.Name)}, existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read NetworkPolicy %s: %w", EgressName(loop.Name), err)
	}
	found := err == nil
	if found && !ownedBy(existing, loop.UID) {
		return &runner.Refused{Reason: "EgressPolicyNameTaken", Message: fmt.Sprintf("NetworkPolicy %s exists and does not belong to this Loop", EgressName(loop.Name))}
	}
	if r.EgressMode(loop) == v1alpha1.EgressUnrestricted {
		if found {
			if err := client.IgnoreNotFound(r.Client.Delete(ctx, existing)); err != nil {
				return fmt.Errorf("delete NetworkPolicy %s: %w", existing.Name, err)
			}
		}
		r.egress.m.Store(key, done)
		return nil
	}
	want, err := r.EgressPolicy(loop)
	if err != nil {
		return err
	}
	switch {
	case !found:
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create NetworkPolicy %s: %w", want.Name, err)
		}
	case !equality.Semantic.DeepEqual(existing.Spec, want.Spec):
		existing.Spec = want.Spec
		if err := r.Client.Update(ctx, existing); err != nil {
			return fmt.Errorf("update NetworkPolicy %s: %w", want.Name, err)
		}
	}
	r.egress.m.Store(key, done)
	return nil
}
