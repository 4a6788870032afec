//go:build integration

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/store/storetest"
)

// useEtcd makes d's config keep its state in etcd at endpoint.
func (d *itDaemon) useEtcd(endpoint, prefix string) {
	d.t.Helper()
	b, err := os.ReadFile(d.cfgPath)
	if err != nil {
		d.t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "daemon {\n", "daemon {\n  store = \"etcd\"\n", 1)
	cfg += fmt.Sprintf("store \"etcd\" {\n  endpoints = [%q]\n  prefix = %q\n}\n", endpoint, prefix)
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// TestDaemonRefusesUnreachableEtcd: a daemon whose shared store does not
// answer does not start, and says which endpoints it tried.
func TestDaemonRefusesUnreachableEtcd(t *testing.T) {
	needDaemon(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	d := newItDaemon(t)
	d.useEtcd(dead, "/skillbox")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, itBin, "serve", "--config", d.cfgPath).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("serve with an unreachable etcd: %v\n%s", err, out)
	}
	for _, want := range []string{dead, "did not answer", `store "etcd"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("serve's error does not say %q:\n%s", want, tailLines(string(out), 20))
		}
	}
}

// TestDaemonReplicasShareState: the state shared by replicas, with
// the real binary over real sockets: two daemons over one etcd. A session
// created on one is used on the other; an approval used on one is refused
// on the other; two consuming one approval at once run it once; each
// replica's audit chain (in one shared audit directory) verifies.
func TestDaemonReplicasShareState(t *testing.T) {
	needDaemon(t)
	bin, err := storetest.EtcdBinary(true)
	if err != nil {
		t.Fatal(err)
	}
	url := storetest.StartEtcd(t, bin)
	shared := t.TempDir()
	a, b := replicaDaemon(t, shared, "replica-a"), replicaDaemon(t, shared, "replica-b")
	a.useEtcd(url, "/skillbox-it")
	b.useEtcd(url, "/skillbox-it")
	a.start()
	b.start()
	ca, cb := a.client(), b.client()
	ctx := ctxT(t)

	sid := must[string](t, "sessions.create on A")(ca.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load on B")(cb.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"guarded-deploy"}}))
	deploy := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"web", "staging", "1.2.3"}}, Skill: "guarded-deploy", Path: "scripts/deploy.sh"}
	ask := func() string {
		t.Helper()
		_, err := ca.RunScript(ctx, api.Peer{}, deploy)
		conf, ok := wantKind(t, "guarded run on A", err, api.KindConfirmationRequired).ConfirmationRequired()
		if !ok {
			t.Fatalf("no confirmation in %v", err)
		}
		must[*api.Confirmation](t, "approve on B")(cb.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: conf.ConfirmationID}))
		return conf.ConfirmationID
	}
	run := deploy
	run.ConfirmationID = ask()
	res := must[*api.RunScriptResult](t, "approved run on A")(ca.RunScript(ctx, api.Peer{}, run))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "deployed web@1.2.3 to staging (simulated)") {
		t.Fatalf("approved run on A: %+v", res)
	}
	_, err = cb.RunScript(ctx, api.Peer{}, run)
	wantKind(t, "the used approval on B", err, api.KindInvalidParams)

	for i := range 3 {
		run.ConfirmationID = ask()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, c := range []*client.Client{ca, cb} {
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[j] = c.RunScript(ctx, api.Peer{}, run) }()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			var ce *client.Error
			switch {
			case err == nil:
				won++
			case !errors.As(err, &ce) || ce.Kind != api.KindInvalidParams:
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: the approved run ran %d times (%v), want once", i, won, errs)
		}
	}

	a.stop()
	b.stop()
	if out, code := verify(t, shared); code != 0 || !strings.Contains(out, "2 chain(s), 2 intact") {
		t.Fatalf("audit verify of both replicas' chains: exit %d\n%s", code, out)
	}
}
