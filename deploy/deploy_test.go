// Package deploy holds Switchyard's deployment files (docker-compose.yml at
// the repository root, deploy/k8s, deploy/nats, deploy/prometheus,
// deploy/grafana) and the test that loads each with its real parser, so
// they cannot rot while no Docker engine or cluster is at hand. The heavy
// parsers (compose-spec's loader, the Kubernetes API types) are imported
// here only.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// subcommands reads the binary's command table from cmd/switchyard/main.go,
// so a deployment naming a command that does not exist fails here.
func subcommands(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile("../cmd/switchyard/main.go")
	if err != nil {
		t.Fatal(err)
	}
	body := src[bytes.Index(src, []byte("func commands()")):]
	body = body[:bytes.Index(body, []byte("\n}\n"))]
	cmds := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*"([a-z-]+)":\s*\{`).FindAllSubmatch(body, -1) {
		cmds[string(m[1])] = true
	}
	if len(cmds) < 3 {
		t.Fatalf("could not read the command table (found %v)", cmds)
	}
	return cmds
}

func TestCompose(t *testing.T) {
	ctx := context.Background()
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yml"},
		cli.WithWorkingDirectory(".."), cli.WithName("switchyard"), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("compose-spec loader rejects docker-compose.yml: %v", err)
	}
	cmds := subcommands(t)

	var natsNodes, routers []string
	for name, s := range p.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			natsNodes = append(natsNodes, name)
			if !slices.Contains(s.Command, "/etc/nats/cluster.conf") {
				t.Errorf("%s does not run deploy/nats/cluster.conf: %v", name, s.Command)
			}
			if s.Environment["NATS_SERVER_NAME"] == nil || *s.Environment["NATS_SERVER_NAME"] != name {
				t.Errorf("%s: NATS_SERVER_NAME must be its own name", name)
			}
		}
		if s.Image != "switchyard:latest" {
			continue
		}
		if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("%s: not built from deploy/Dockerfile: %+v", name, s.Build)
		}
		if len(s.Command) == 0 || !cmds[s.Command[0]] {
			t.Errorf("%s runs %v, which is not a switchyard subcommand (have %v)", name, s.Command, cmds)
			continue
		}
		if !hasFlagValue(s.Command, "--nats", "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222") {
			t.Errorf("%s: --nats must list all three nodes: %v", name, s.Command)
		}
		if s.Command[0] == "router" {
			routers = append(routers, name)
		}
	}
	slices.Sort(natsNodes)
	if !slices.Equal(natsNodes, []string{"nats-1", "nats-2", "nats-3"}) {
		t.Errorf("NATS nodes = %v, want nats-1..3", natsNodes)
	}
	if len(routers) != 2 {
		t.Errorf("routers = %v, want 2", routers)
	}
	for _, want := range []string{"admitter", "gateway", "worker", "prometheus", "grafana"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("service %s missing", want)
		}
	}
	if w := p.Services["worker"]; w.Deploy == nil || w.Deploy.Replicas == nil || *w.Deploy.Replicas < 2 {
		t.Errorf("worker must scale through deploy.replicas: %+v", w.Deploy)
	}
	if g := p.Services["gateway"]; len(g.Command) < 3 || g.Command[0] != "gateway" || !hasFlagValue(g.Command, "--listen", ":8080") {
		t.Errorf("gateway command %v", g.Command)
	}
	// Every file mounted from the repository exists.
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s mounts missing %s", name, v.Source)
				}
			}
		}
	}
}

func hasFlagValue(args []string, flag, value string) bool {
	for i, a := range args {
		if a == flag+"="+value || (a == flag && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
}

// TestNATSClusterConfig parses deploy/nats/cluster.conf with nats-server's
// own config parser, as each node would.
func TestNATSClusterConfig(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "nats-2")
	o, err := server.ProcessConfigFile("nats/cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	if o.ServerName != "nats-2" || !o.JetStream || o.StoreDir != "/data/jetstream" {
		t.Errorf("server name %q, jetstream %v, store %q", o.ServerName, o.JetStream, o.StoreDir)
	}
	if o.Cluster.Name != "switchyard" || o.Cluster.Port != 6222 || len(o.Routes) != 3 || o.HTTPPort != 8222 {
		t.Errorf("cluster %q port %d, %d routes, http %d", o.Cluster.Name, o.Cluster.Port, len(o.Routes), o.HTTPPort)
	}
}

// manifests decodes every YAML document under k8s/.
func manifests(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	files, _ := filepath.Glob("k8s/*.yaml")
	out := map[string][]*unstructured.Unstructured{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[u.GetKind()] = append(out[u.GetKind()], u)
		}
	}
	return out
}

// typed decodes an object into its real API type, rejecting unknown fields
// so a misspelt field fails instead of being silently dropped.
func typed(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func TestKubernetes(t *testing.T) {
	m := manifests(t)
	cmds := subcommands(t)
	deployments := map[string]*appsv1.Deployment{}
	for _, u := range m["Deployment"] {
		var d appsv1.Deployment
		typed(t, u, &d)
		deployments[d.Name] = &d
		c := d.Spec.Template.Spec.Containers[0]
		if len(c.Args) == 0 || !cmds[c.Args[0]] {
			t.Errorf("deployment %s runs %v, not a switchyard subcommand", d.Name, c.Args)
		}
		if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--nats=nats://nats:4222") }) {
			t.Errorf("deployment %s does not point --nats at the nats Service: %v", d.Name, c.Args)
		}
		sel := d.Spec.Selector.MatchLabels
		for k, v := range sel {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("deployment %s: selector %s=%s does not match its pod labels", d.Name, k, v)
			}
		}
	}
	for _, name := range []string{"switchyard-admitter", "switchyard-router", "switchyard-worker"} {
		if deployments[name] == nil {
			t.Errorf("deployment %s missing", name)
		}
	}
	if r := deployments["switchyard-router"]; r != nil && (r.Spec.Replicas == nil || *r.Spec.Replicas != 2) {
		t.Errorf("router replicas %v, want 2", r.Spec.Replicas)
	}
	var sts appsv1.StatefulSet
	if len(m["StatefulSet"]) != 1 {
		t.Fatalf("want one NATS StatefulSet, have %d", len(m["StatefulSet"]))
	}
	typed(t, m["StatefulSet"][0], &sts)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 || sts.Spec.ServiceName != "nats-headless" {
		t.Errorf("NATS StatefulSet: replicas %v, service %q", sts.Spec.Replicas, sts.Spec.ServiceName)
	}
	services := map[string]bool{}
	for _, u := range m["Service"] {
		var s corev1.Service
		typed(t, u, &s)
		services[s.Name] = true
	}
	for _, want := range []string{"nats", "nats-headless", "switchyard-admitter", "switchyard-router", "switchyard-worker"} {
		if !services[want] {
			t.Errorf("Service %s missing", want)
		}
	}
	configs := map[string]*corev1.ConfigMap{}
	for _, u := range m["ConfigMap"] {
		var c corev1.ConfigMap
		typed(t, u, &c)
		configs[c.Name] = &c
	}
	if c := configs["switchyard-tenant-profiles"]; c == nil || !json.Valid([]byte(c.Data["tenants.json"])) {
		t.Error("tenant ConfigMap missing or its tenants.json is not JSON")
	}
	// The in-cluster NATS config parses with nats-server's parser too.
	if c := configs["nats-config"]; c == nil {
		t.Error("nats-config ConfigMap missing")
	} else {
		f := filepath.Join(t.TempDir(), "nats.conf")
		os.WriteFile(f, []byte(c.Data["nats.conf"]), 0o600)
		t.Setenv("POD_NAME", "nats-0")
		o, err := server.ProcessConfigFile(f)
		if err != nil {
			t.Fatalf("nats-config: %v", err)
		}
		if !o.JetStream || len(o.Routes) != 3 || o.ServerName != "nats-0" {
			t.Errorf("nats-config: jetstream %v, %d routes, name %q", o.JetStream, len(o.Routes), o.ServerName)
		}
	}
	if len(m["Namespace"]) != 1 {
		t.Error("namespace manifest missing")
	}
	checkScaledObject(t, m["ScaledObject"], deployments)
}

// checkScaledObject validates the KEDA object without KEDA's Go module: its
// required fields, and that each nats-jetstream trigger names a stream and
// consumer that Switchyard actually creates.
func checkScaledObject(t *testing.T, objs []*unstructured.Unstructured, deployments map[string]*appsv1.Deployment) {
	t.Helper()
	if len(objs) != 1 {
		t.Fatalf("want one ScaledObject, have %d", len(objs))
	}
	so := objs[0]
	if so.GetAPIVersion() != "keda.sh/v1alpha1" {
		t.Errorf("ScaledObject apiVersion %q", so.GetAPIVersion())
	}
	target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	if deployments[target] == nil || target != "switchyard-worker" {
		t.Errorf("ScaledObject targets %q, want the worker Deployment", target)
	}
	// JSON numbers decode as float64 in an unstructured object.
	num := func(field string) float64 {
		v, _, _ := unstructured.NestedFieldNoCopy(so.Object, "spec", field)
		f, _ := v.(float64)
		return f
	}
	minR, maxR := num("minReplicaCount"), num("maxReplicaCount")
	if minR < 1 || maxR <= minR {
		t.Errorf("replica bounds %g..%g", minR, maxR)
	}
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(triggers) == 0 {
		t.Fatal("no triggers")
	}
	consumers := map[string]bool{"router-critical": true, "router-interactive": true, "router-standard": true, "router-batch": true}
	for i, tr := range triggers {
		trm := tr.(map[string]any)
		if trm["type"] != "nats-jetstream" {
			t.Errorf("trigger %d type %v", i, trm["type"])
			continue
		}
		md, _ := trm["metadata"].(map[string]any)
		for _, k := range []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"} {
			if s, _ := md[k].(string); s == "" {
				t.Errorf("trigger %d: metadata.%s required", i, k)
			}
		}
		if md["stream"] != "ADMITTED" || !consumers[md["consumer"].(string)] {
			t.Errorf("trigger %d watches %v/%v, not a router consumer on ADMITTED", i, md["stream"], md["consumer"])
		}
		if ep, _ := md["natsServerMonitoringEndpoint"].(string); !strings.HasSuffix(ep, ":8222") {
			t.Errorf("trigger %d: monitoring endpoint %q is not the NATS monitor port", i, ep)
		}
	}
}

// TestPrometheusAndGrafana checks that the scrape config names every
// compose service that serves metrics and that the dashboard is valid
// Grafana JSON whose queries use documented metric names.
func TestPrometheusAndGrafana(t *testing.T) {
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `json:"names"`
			} `json:"dns_sd_configs"`
		} `json:"scrape_configs"`
	}
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &prom); err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				targets[strings.Split(tg, ":")[0]] = true
			}
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				targets[n] = true
			}
		}
	}
	for _, want := range []string{"admitter", "router-1", "router-2", "worker", "gateway", "nats-exporter-1", "nats-exporter-2", "nats-exporter-3"} {
		if !targets[want] {
			t.Errorf("prometheus does not scrape %s", want)
		}
	}

	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile("grafana/switchyard-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	metric := regexp.MustCompile(`switchyard_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range metric.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if !bytes.Contains(doc, []byte("`"+base)) {
					t.Errorf("panel %q uses %s, which docs/metrics.md does not document", p.Title, base)
				}
			}
		}
	}
	for _, want := range []string{"queue depth", "placement", "slo", "cache", "shed", "breaker", "retr", "cost per success", "simulated"} {
		if !slices.ContainsFunc(dash.Panels, func(p struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		}) bool {
			return strings.Contains(strings.ToLower(p.Title), want)
		}) {
			t.Errorf("dashboard has no %q panel", want)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
