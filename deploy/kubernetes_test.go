package deploy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// cluster is one built kustomization, decoded strictly into typed objects.
type cluster struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	namespaces   []*corev1.Namespace
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	monitors     []*monitoringv1.ServiceMonitor
}

// decodeStrict decodes one object, refusing unknown fields, so a typo in a
// manifest (or a field of a newer API) fails here instead of in a cluster.
func decodeStrict[T any](t *testing.T, data []byte, apiVersion, kind string) *T {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		t.Fatal(err)
	}
	if head.APIVersion != apiVersion {
		t.Fatalf("%s has apiVersion %s, want %s", kind, head.APIVersion, apiVersion)
	}
	obj := new(T)
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s does not decode strictly: %v\n%s", kind, err, data)
	}
	return obj
}

func build(t *testing.T, dir string) *cluster {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	c := &cluster{}
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		switch kind := r.GetKind(); kind {
		case "StatefulSet":
			c.statefulSets = append(c.statefulSets, decodeStrict[appsv1.StatefulSet](t, data, "apps/v1", kind))
		case "Service":
			c.services = append(c.services, decodeStrict[corev1.Service](t, data, "v1", kind))
		case "ConfigMap":
			c.configMaps = append(c.configMaps, decodeStrict[corev1.ConfigMap](t, data, "v1", kind))
		case "Secret":
			c.secrets = append(c.secrets, decodeStrict[corev1.Secret](t, data, "v1", kind))
		case "Namespace":
			c.namespaces = append(c.namespaces, decodeStrict[corev1.Namespace](t, data, "v1", kind))
		case "PodDisruptionBudget":
			c.pdbs = append(c.pdbs, decodeStrict[policyv1.PodDisruptionBudget](t, data, "policy/v1", kind))
		case "HorizontalPodAutoscaler":
			c.hpas = append(c.hpas, decodeStrict[autoscalingv2.HorizontalPodAutoscaler](t, data, "autoscaling/v2", kind))
		case "ServiceMonitor":
			c.monitors = append(c.monitors, decodeStrict[monitoringv1.ServiceMonitor](t, data, "monitoring.coreos.com/v1", kind))
		default:
			t.Fatalf("%s: unexpected kind %s (add it to this test)", dir, kind)
		}
	}
	return c
}

func (c *cluster) configMap(name string) *corev1.ConfigMap {
	for _, m := range c.configMaps {
		if m.Name == name {
			return m
		}
	}
	return nil
}

func (c *cluster) service(name string) *corev1.Service {
	for _, s := range c.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

var overlays = []string{"base", "overlays/development", "overlays/production", "overlays/userns"}

// TestKubernetes builds every kustomization and checks the invariants that
// tie the manifests to forge: the config forge gets is one it accepts, the
// ports are the ones it listens on, the state dir is on the PVC, probes and
// metrics hit paths forge serves, Services, PDB, HPA and ServiceMonitor
// select what they should.
func TestKubernetes(t *testing.T) {
	for _, dir := range overlays {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			c := build(t, filepath.Join("kubernetes", dir))
			checkCluster(t, dir, c)
		})
	}
}

func checkCluster(t *testing.T, dir string, c *cluster) {
	if len(c.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want 1", len(c.statefulSets))
	}
	ss := c.statefulSets[0]
	pod := ss.Spec.Template
	podLabels := labels.Set(pod.Labels)
	sel := labels.SelectorFromSet(ss.Spec.Selector.MatchLabels)
	must(t, sel.Matches(podLabels), "StatefulSet selector %v does not match its pods %v", sel, podLabels)
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]

	// The configuration: mounted from the generated ConfigMap, at the path
	// the args name, and accepted by forge.
	i := slices.Index(ctr.Args, "--config")
	if i < 0 || i+1 >= len(ctr.Args) {
		t.Fatalf("args %v name no --config", ctr.Args)
	}
	cfgFile := ctr.Args[i+1]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m
	}
	var cm *corev1.ConfigMap
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			cm = c.configMap(v.ConfigMap.Name)
			if cm == nil {
				t.Fatalf("volume %s names ConfigMap %s, which the kustomization does not make", v.Name, v.ConfigMap.Name)
			}
			m, ok := mounts[v.Name]
			if !ok || filepath.Join(m.MountPath, "forge.yaml") != cfgFile || !m.ReadOnly {
				t.Fatalf("ConfigMap volume %s mounted %+v; --config is %s", v.Name, m, cfgFile)
			}
		}
	}
	if cm == nil || cm.Data["forge.yaml"] == "" {
		t.Fatal("no ConfigMap with forge.yaml is mounted")
	}
	cfg := parseConfig(t, []byte(cm.Data["forge.yaml"]), dir+" ConfigMap "+cm.Name)
	checkServeArgs(t, append(slices.Clone(ctr.Command), ctr.Args...), cfg.Server.HTTPAddr)

	// Ports: the container's http port is the one forge listens on.
	var httpPort int32
	for _, p := range ctr.Ports {
		if p.Name == "http" {
			httpPort = p.ContainerPort
		}
	}
	must(t, cfg.Server.Transport == "http", "server.transport is %q, want http", cfg.Server.Transport)
	must(t, strconv.Itoa(int(httpPort)) == port(t, cfg.Server.HTTPAddr), "containerPort http %d, but forge listens on %s", httpPort, cfg.Server.HTTPAddr)
	must(t, len(cfg.Server.Auth.Tokens) > 0, "no token configured: forge would refuse to listen beyond loopback")

	// Sandboxes together stay below the pod's memory limit, so the kernel
	// kills a sandbox before it kills forge.
	if lim, ok := ctr.Resources.Limits[corev1.ResourceMemory]; !ok || int64(cfg.Limits.Memory) == 0 || int64(cfg.Limits.Memory) >= lim.Value() {
		t.Errorf("limits.memory %d is not below the container's memory limit %v", cfg.Limits.Memory, ctr.Resources.Limits.Memory())
	}

	// The state dir is on the PVC.
	if len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volumeClaimTemplates, want 1", len(ss.Spec.VolumeClaimTemplates))
	}
	pvc := ss.Spec.VolumeClaimTemplates[0].Name
	must(t, mounts[pvc].MountPath == cfg.StateDir, "PVC %s is mounted at %q, the state dir is %q", pvc, mounts[pvc].MountPath, cfg.StateDir)

	// Probes hit forge's health paths on the http port.
	for name, p := range map[string]*corev1.Probe{"startup": ctr.StartupProbe, "readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", name)
			continue
		}
		must(t, p.HTTPGet.Port.String() == "http", "%s probe on port %s", name, p.HTTPGet.Port.String())
		must(t, p.HTTPGet.Path == "/healthz" || p.HTTPGet.Path == "/readyz", "%s probe path %s is not one forge serves unauthenticated", name, p.HTTPGet.Path)
	}
	must(t, ctr.LivenessProbe != nil && ctr.LivenessProbe.HTTPGet.Path == "/healthz", "liveness must be /healthz (alive), not /readyz")

	// Secrets the pod reads exist (generated) or are named in the docs.
	for _, e := range ctr.Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			found := false
			for _, s := range c.secrets {
				found = found || s.Name == r.SecretKeyRef.Name
			}
			must(t, found || strings.HasPrefix(r.SecretKeyRef.Name, "forge-tokens"), "env %s reads Secret %s", e.Name, r.SecretKeyRef.Name)
		}
	}

	// Services: the headless one is the StatefulSet's, the client one has
	// affinity; both select the pods and target the http port.
	headless := c.service(ss.Spec.ServiceName)
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("serviceName %s is not a headless Service", ss.Spec.ServiceName)
	}
	var client *corev1.Service
	for _, s := range c.services {
		must(t, labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels), "Service %s selects %v, not the pods", s.Name, s.Spec.Selector)
		for _, p := range s.Spec.Ports {
			must(t, p.TargetPort.String() == "http", "Service %s targets port %s", s.Name, p.TargetPort.String())
		}
		if s != headless {
			client = s
		}
	}
	if client == nil || client.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Fatalf("no client Service with ClientIP affinity")
	}

	// PDB, HPA and ServiceMonitor.
	if len(c.pdbs) != 1 || !labels.SelectorFromSet(c.pdbs[0].Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Error("the PodDisruptionBudget does not select the pods")
	}
	if len(c.hpas) != 1 {
		t.Fatalf("%d HPAs", len(c.hpas))
	}
	ref := c.hpas[0].Spec.ScaleTargetRef
	must(t, ref.Kind == "StatefulSet" && ref.Name == ss.Name && ref.APIVersion == "apps/v1", "HPA scales %+v", ref)
	must(t, *c.hpas[0].Spec.MinReplicas <= c.hpas[0].Spec.MaxReplicas, "HPA min > max")
	must(t, ss.Spec.Replicas != nil && *ss.Spec.Replicas >= *c.hpas[0].Spec.MinReplicas, "replicas below the HPA's minimum")
	// The ServiceMonitor needs the Prometheus Operator's CRD: only the
	// production overlay includes it; where the CRD is missing, `kubectl
	// apply -k` fails on it (seen on a real cluster).
	wantMonitors := 0
	if dir == "overlays/production" {
		wantMonitors = 1
	}
	if len(c.monitors) != wantMonitors {
		t.Fatalf("%d ServiceMonitors, want %d", len(c.monitors), wantMonitors)
	}
	for _, mon := range c.monitors {
		var scraped []string
		for _, s := range c.services {
			if labels.SelectorFromSet(mon.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
				scraped = append(scraped, s.Name)
			}
		}
		must(t, fmt.Sprint(scraped) == fmt.Sprint([]string{headless.Name}), "the ServiceMonitor selects %v, want only the headless Service (each pod once)", scraped)
		for _, ep := range mon.Spec.Endpoints {
			must(t, ep.Port == "http" && ep.Path == "/metrics", "ServiceMonitor endpoint %s%s", ep.Port, ep.Path)
		}
	}

	// What the pod needs from the node, stated in the manifest.
	sc := ctr.SecurityContext
	switch dir {
	case "overlays/userns":
		must(t, pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers, "userns overlay without hostUsers: false")
		must(t, sc != nil && sc.Privileged != nil && !*sc.Privileged, "userns overlay still privileged")
		must(t, cfg.Security.UIDRangeStart+cfg.Security.UIDRangeSize <= 65536, "uid range %d+%d does not fit a pod's 65536 ids", cfg.Security.UIDRangeStart, cfg.Security.UIDRangeSize)
	default:
		must(t, sc != nil && sc.Privileged != nil && *sc.Privileged, "%s: forge needs a privileged pod (or the userns overlay)", dir)
	}
}

// TestKubernetesProbesLive starts forge with the base manifest's
// configuration and calls what the cluster would: the probes' paths
// without a token, /metrics with the ServiceMonitor's bearer token.
func TestKubernetesProbesLive(t *testing.T) {
	c := build(t, filepath.Join("kubernetes", "base"))
	ctr := c.statefulSets[0].Spec.Template.Spec.Containers[0]
	var config []byte
	for _, m := range c.configMaps {
		config = []byte(m.Data["forge.yaml"])
	}
	base := liveForge(t, config)
	for _, p := range []*corev1.Probe{ctr.LivenessProbe, ctr.StartupProbe, ctr.ReadinessProbe} {
		eventually(t, base, p.HTTPGet.Path, false, 200)
		// As the kubelet sends it: the pod's IP as Host, which the
		// DNS-rebinding guard must not refuse for the probe paths.
		code := probe(t, base, p.HTTPGet.Path)
		must(t, code == 200, "probe %s with the pod IP as Host: %d, want 200", p.HTTPGet.Path, code)
	}
	eventually(t, base, "/metrics", true, 200)
	must(t, get(t, base, "/api/v1/version", false) == 401, "the REST API answers without a token")
}
