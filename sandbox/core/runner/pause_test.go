package runner

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
)

func TestPlacedMapRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]placedSkill
	}{
		{"none", map[string]placedSkill{}},
		{"one", map[string]placedSkill{"pdf": {root: "/var/lib/skillbox/snapshots/pdf/ab", digest: "sha256:ab"}}},
		{"several", map[string]placedSkill{
			"a": {root: "/r/a", digest: "sha256:1"},
			"b": {root: "/r/b", digest: ""},
			"c": {root: "", digest: "sha256:3"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(placedMap(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var back map[string][2]string
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			got := map[string]placedSkill{}
			for n, v := range back {
				got[n] = placedSkill{root: v[0], digest: v[1]}
			}
			if !reflect.DeepEqual(got, tc.in) {
				t.Errorf("round trip of %+v gives %+v (%s)", tc.in, got, raw)
			}
		})
	}
}

// pausedBox is a box as a checkpoint of it would have it.
func pausedBox(t *testing.T, m *SessionSandboxes) *sessionBox {
	t.Helper()
	b := testBox(t, m, "ses_1")
	b.rootfs = "/var/lib/skillbox/images/python/rootfs"
	lim := runtime.Limits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20, Pids: 128, CPUs: 1.5, OutputFiles: 10}
	img := runtime.ImageRef{Name: "python", Digest: "sha256:feed"}
	b.key.limits = lim.Sandbox()
	b.spec = runtime.SandboxSpec{ID: b.id, RootFS: b.rootfs, Image: img, Limits: lim, Boot: runtime.BootSession,
		Session: &runtime.SessionMounts{SkillsDir: b.skillsDir, Layers: "/var/lib/skillbox/images/layers", Supervisor: m.o.Supervisor}}
	b.skills["pdf"] = placedSkill{root: "/snap/pdf/1", digest: "sha256:p1"}
	b.skills["xlsx"] = placedSkill{root: "/snap/xlsx/2", digest: "sha256:x2"}
	return b
}

// TestBoxOfManifestRoundTrip: what ownerOf keeps of a box makes the same
// box again (the one a restore boots from).
func TestBoxOfManifestRoundTrip(t *testing.T) {
	m := newTestSessions(t)
	b := pausedBox(t, m)
	owner, err := m.ownerOf(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.boxOfManifest(&checkpoint.Manifest{ID: "ck-0123456789abcdef01234567", Session: "ses_1", Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if got.key != b.key {
		t.Errorf("key %+v, want %+v", got.key, b.key)
	}
	if got.id != b.id || got.rootfs != b.rootfs || got.skillsDir != b.skillsDir || got.ckpt != "ck-0123456789abcdef01234567" {
		t.Errorf("box %s rootfs %s dir %s ckpt %s; want %s %s %s", got.id, got.rootfs, got.skillsDir, got.ckpt, b.id, b.rootfs, b.skillsDir)
	}
	if !reflect.DeepEqual(got.skills, b.skills) {
		t.Errorf("skills %+v, want %+v", got.skills, b.skills)
	}
	if got.spec.ID != b.id || got.spec.RootFS != b.rootfs || got.spec.Image != b.spec.Image || got.spec.Limits != b.spec.Limits ||
		got.spec.Boot != runtime.BootSession || got.spec.OnBackgroundExit == nil {
		t.Errorf("spec %+v, want %+v", got.spec, b.spec)
	}
	if s := got.spec.Session; s == nil || *s != *b.spec.Session {
		t.Errorf("session mounts %+v, want %+v", s, b.spec.Session)
	}
	if got.sb != nil || got.err != nil || !isDone(got.ready) {
		t.Error("a box of a manifest is not paused and ready")
	}
}

// TestBoxOfManifestRefused: a manifest whose owner fields do not make a
// box is refused, saying which field.
func TestBoxOfManifestRefused(t *testing.T) {
	m := newTestSessions(t)
	good, err := m.ownerOf(pausedBox(t, m), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(o map[string]string)
		want string
	}{
		{"no owner", func(o map[string]string) { clear(o) }, "limits"},
		{"limits not JSON", func(o map[string]string) { o[ownerLimits] = "{" }, "limits"},
		{"limits of the wrong type", func(o map[string]string) { o[ownerLimits] = `{"memory_bytes":"lots"}` }, "limits"},
		{"limits a list", func(o map[string]string) { o[ownerLimits] = `[1]` }, "limits"},
		{"image not JSON", func(o map[string]string) { o[ownerImageRef] = "python" }, "image"},
		{"skills not a map", func(o map[string]string) { o[ownerSkills] = `["pdf"]` }, "skills"},
		{"no box id", func(o map[string]string) { delete(o, ownerBox) }, "sandbox id"},
		{"box id a path", func(o map[string]string) { o[ownerBox] = "../../etc" }, "sandbox id"},
		{"box id dot", func(o map[string]string) { o[ownerBox] = "." }, "sandbox id"},
		{"box id with a slash", func(o map[string]string) { o[ownerBox] = "skillbox-s1/x" }, "sandbox id"},
		{"box id too long", func(o map[string]string) { o[ownerBox] = "s" + strings.Repeat("x", 64) }, "sandbox id"},
		{"box without its skills dir", func(o map[string]string) { o[ownerBox] = "skillbox-sgone" }, "skills dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := map[string]string{}
			for k, v := range good {
				o[k] = v
			}
			tc.edit(o)
			b, err := m.boxOfManifest(&checkpoint.Manifest{ID: "ck-0123456789abcdef01234567", Session: "ses_1", Owner: o})
			if err == nil {
				t.Fatalf("made box %+v", b)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want it to name %q", err, tc.want)
			}
		})
	}
}

// FuzzBoxOfManifest: whatever a checkpoint's owner fields hold, making its
// box does not panic, and a box made has an id that is a plain name whose
// skills dir is in the sessions dir.
func FuzzBoxOfManifest(f *testing.F) {
	f.Add("skillbox-s1", `{"memory_bytes":536870912}`, `{"name":"python","digest":"sha256:aa"}`, `{"pdf":["/snap/pdf","sha256:1"]}`)
	f.Add("skillbox-s1", "null", "null", "null")
	f.Add("../x", "{}", "{}", "{}")
	f.Add("", "", "", "")
	dir := f.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "skillbox-s1"), 0o755); err != nil {
		f.Fatal(err)
	}
	m := NewSessionSandboxes(SessionOptions{Dir: dir, Supervisor: "/nonexistent/skillbox"}, nil, nil)
	f.Fuzz(func(t *testing.T, box, limits, image, skills string) {
		b, err := m.boxOfManifest(&checkpoint.Manifest{Session: "ses_1", Owner: map[string]string{
			ownerBox: box, ownerLimits: limits, ownerImageRef: image, ownerSkills: skills}})
		if err != nil {
			return
		}
		if !runtime.JobIDPattern.MatchString(b.id) || filepath.Dir(b.skillsDir) != dir || filepath.Base(b.skillsDir) != b.id {
			t.Errorf("box %q with skills dir %q", b.id, b.skillsDir)
		}
	})
}

// TestSweepDeadPIDDirs: the dirs of processes that died go, this process's
// own, a live process's and anything not named by a pid stay.
func TestSweepDeadPIDDirs(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true to make a dead pid:", err)
	}
	dead := cmd.Process.Pid
	parent := t.TempDir()
	own := SessionDirPIDPrefix + strconv.Itoa(os.Getpid())
	names := map[string]bool{ // name: kept
		own:                                      true,
		SessionDirPIDPrefix + "1":                true, // alive (init), or ours to not judge
		SessionDirPIDPrefix + strconv.Itoa(dead): false,
		SessionDirPIDPrefix + "x":                true,
		SessionDirPIDPrefix + "0":                true,
		"sbx-other":                              true,
	}
	for n := range names {
		if err := os.MkdirAll(filepath.Join(parent, n, "skills"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepDeadPIDDirs(parent, own)
	for n, kept := range names {
		_, err := os.Stat(filepath.Join(parent, n))
		if (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", n, err == nil, kept)
		}
	}
}
