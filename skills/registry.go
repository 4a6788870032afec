package skills

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Registry defaults. Depth 4 covers root/skill and root/group/skill layouts
// with room to spare while keeping a root like $HOME from being crawled.
const (
	DefaultMaxDepth     = 4
	DefaultMaxSkills    = 50_000
	DefaultDebounce     = 100 * time.Millisecond
	DefaultPollInterval = time.Second
)

// RegistryOptions configure a Registry.
type RegistryOptions struct {
	// Roots are searched in order; a skill in a later root overrides one of
	// the same name in an earlier root (e.g. global, then user, then project).
	// A skill's name is its directory's name; a name two directories of the
	// deciding root claim is refused for both (ErrConflict).
	Roots []string
	// MaxDepth is how far below a root a skill directory may be (default 4);
	// MaxSkills caps how many skills are indexed (default 50,000).
	MaxDepth, MaxSkills int
	// AllowExtensions accepts extension fields without warnings.
	AllowExtensions bool
	Logger          hclog.Logger
	// Debounce is how long Watch waits for a burst of file events to settle
	// before reloading (default 100ms).
	Debounce time.Duration
	// PollInterval is how often Watch rescans when file notifications are
	// unavailable (no inotify, or out of inotify watches); default 1s.
	PollInterval time.Duration
}

// Problem is a skill directory that could not be indexed, or could only be
// kept at its last good version.
type Problem struct {
	Path string `json:"path"`
	Err  error  `json:"-"`
}

func (p Problem) String() string { return p.Path + ": " + p.Err.Error() }

// MarshalJSON renders the problem as {"path": ..., "error": ...}.
func (p Problem) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Path  string `json:"path"`
		Error string `json:"error"`
	}{p.Path, p.Err.Error()})
}

// Registry indexes the skills under a set of roots. Lookups read an
// immutable snapshot, so they never wait for a reload; Skill values it hands
// out are shared and must not be modified.
type Registry struct {
	opts     RegistryOptions
	log      hclog.Logger
	reloadMu sync.Mutex
	state    atomic.Pointer[snapshot]
}

type snapshot struct {
	gen    uint64
	byName map[string]*Skill
	sorted []*Skill
	// conflicts are names claimed by more than one skill directory of the
	// root that decides them: refused for all claimants (name -> dirs).
	conflicts map[string][]string
	byDir     map[string]loaded // last good load per skill directory
	problems  []Problem
	watch     []string // directories whose changes can change the index
}

type loaded struct {
	skill *Skill
	fp    string // fingerprint the skill was loaded at
}

// NewRegistry checks opts and returns an empty registry; call Reload to
// index, Watch to keep the index current.
func NewRegistry(opts RegistryOptions) (*Registry, error) {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	if opts.MaxSkills <= 0 {
		opts.MaxSkills = DefaultMaxSkills
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	roots := make([]string, 0, len(opts.Roots))
	for _, r := range opts.Roots {
		if r == "" {
			return nil, fmt.Errorf("skills registry: empty root path; give a directory that holds skills")
		}
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("skills registry: root %s: %w", r, err)
		}
		roots = append(roots, abs)
	}
	opts.Roots = roots
	reg := &Registry{opts: opts, log: opts.Logger.Named("skills.registry")}
	reg.state.Store(&snapshot{byName: map[string]*Skill{}, byDir: map[string]loaded{}})
	return reg, nil
}

// Roots returns the absolute roots in precedence order (last wins).
func (r *Registry) Roots() []string { return append([]string(nil), r.opts.Roots...) }

// Generation increases with every reload that changed the index.
func (r *Registry) Generation() uint64 { return r.state.Load().gen }

// List returns the indexed skills sorted by name.
func (r *Registry) List() []*Skill {
	return append([]*Skill(nil), r.state.Load().sorted...)
}

// Problems returns the skill directories the last reload skipped or kept
// at their last good version, with the reason.
func (r *Registry) Problems() []Problem {
	return append([]Problem(nil), r.state.Load().problems...)
}

// Get returns the skill called name (compared after NFKC normalisation).
func (r *Registry) Get(name string) (*Skill, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	st := r.state.Load()
	key := NormalizeName(name)
	if s := st.byName[key]; s != nil {
		return s, nil
	}
	if dirs, ok := st.conflicts[key]; ok {
		return nil, conflictError(name, dirs)
	}
	for _, p := range st.problems {
		if NormalizeName(filepath.Base(p.Path)) == key {
			return nil, errkind.Errorf(ErrNotFound, "skill %q at %s could not be loaded: %v; fix its SKILL.md (check with 'skillbox skills validate %s')", name, p.Path, p.Err, p.Path)
		}
	}
	hint := ""
	if s := closest(key, st.sorted); s != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", s)
	}
	return nil, errkind.Errorf(ErrNotFound, "no skill named %q%s; list the available names with skills.list or 'skillbox skills list --root DIR'", name, hint)
}

// Conflicts returns the names refused because more than one skill
// directory claims them, with the directories (name -> dirs).
func (r *Registry) Conflicts() map[string][]string {
	st := r.state.Load()
	out := make(map[string][]string, len(st.conflicts))
	for n, d := range st.conflicts {
		out[n] = append([]string(nil), d...)
	}
	return out
}

// conflictError says that name is refused because dirs all claim it, and
// what resolves it.
func conflictError(name string, dirs []string) error {
	return errkind.Errorf(ErrConflict, "skill name %q is claimed by %d skill directories in the same root (%s); it is refused for all of them until only one is left: rename or remove the others (a skill is known by its directory's name)", name, len(dirs), strings.Join(dirs, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Reload rescans every root and swaps in the new index atomically. Only
// skills whose files changed since the last reload are parsed and hashed
// again (a stat-only fingerprint decides). A skill that used to load but is
// now broken keeps its last good version and is reported in Problems.
func (r *Registry) Reload(ctx context.Context) error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	start := time.Now()
	old := r.state.Load()
	next := &snapshot{byName: map[string]*Skill{}, byDir: map[string]loaded{}, conflicts: map[string][]string{}}
	owner := map[string]string{} // name -> dir that defines it

	// Scan every root first, then load the skill directories in parallel
	// (loading is mostly waiting on the file system), then apply
	// precedence in root order.
	type job struct {
		root int
		dir  string
		res  loadResult
	}
	var jobs []job
	for i, root := range r.opts.Roots {
		dirs, watch, probs := r.scanRoot(root, r.opts.MaxSkills-len(jobs))
		next.watch = append(next.watch, watch...)
		next.problems = append(next.problems, probs...)
		for _, d := range dirs {
			jobs = append(jobs, job{root: i, dir: d})
		}
	}
	var wg sync.WaitGroup
	var nextJob atomic.Int64
	for range min(len(jobs), 2*runtime.GOMAXPROCS(0)+2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(nextJob.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				jobs[i].res = r.loadCached(old, jobs[i].dir)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}

	// Precedence: a later root overrides an earlier one (the order of the
	// configured roots is the trust order). Within one root, a name claimed
	// by two directories is refused for both: which one would win must
	// never depend on directory sort order, or a new directory could take
	// over a trusted skill's name and with it its policy.
	claims := map[string][]*Skill{}
	var order []string
	flush := func() {
		for _, name := range order {
			c := claims[name]
			if prev, ok := owner[name]; ok {
				r.log.Debug("skill overridden by a later root", "name", name, "overridden", prev)
			}
			if len(c) == 1 {
				owner[name] = c[0].Dir
				next.byName[name] = c[0]
				delete(next.conflicts, name)
				continue
			}
			dirs := make([]string, len(c))
			for i, s := range c {
				dirs[i] = s.Dir
			}
			owner[name] = strings.Join(dirs, ", ")
			delete(next.byName, name)
			next.conflicts[name] = dirs
		}
		clear(claims)
		order = order[:0]
	}
	for i, j := range jobs {
		if i > 0 && jobs[i-1].root != j.root {
			flush()
		}
		res := j.res
		next.watch = append(next.watch, res.subdirs...)
		if res.problem != nil {
			next.problems = append(next.problems, *res.problem)
		}
		if res.entry.skill == nil {
			continue
		}
		next.byDir[j.dir] = res.entry
		s := res.entry.skill
		if _, ok := claims[s.Name]; !ok {
			order = append(order, s.Name)
		}
		claims[s.Name] = append(claims[s.Name], s)
	}
	flush()
	for _, name := range sortedKeys(next.conflicts) {
		dirs := next.conflicts[name]
		for _, d := range dirs {
			next.problems = append(next.problems, Problem{Path: d, Err: conflictError(name, dirs)})
		}
	}
	for _, s := range next.byName {
		next.sorted = append(next.sorted, s)
	}
	sort.Slice(next.sorted, func(i, j int) bool { return next.sorted[i].Name < next.sorted[j].Name })

	added, changed, removed := diff(old.byName, next.byName)
	next.gen = old.gen
	if len(added)+len(changed)+len(removed) > 0 || len(next.problems) != len(old.problems) {
		next.gen++
	}
	r.state.Store(next)

	initial := old.gen == 0 && len(old.byName) == 0
	if !initial {
		logNames(r.log, "skill added", added)
		logNames(r.log, "skill changed", changed)
		logNames(r.log, "skill removed", removed)
	}
	known := map[string]bool{}
	for _, p := range old.problems {
		known[p.String()] = true
	}
	for _, p := range next.problems {
		if !known[p.String()] {
			r.log.Warn("skill problem", "path", p.Path, "error", p.Err)
		}
	}
	r.log.Debug("skills indexed", "count", len(next.sorted), "problems", len(next.problems), "duration", time.Since(start))
	return nil
}

// loadResult is what loading one skill directory produced. entry is the
// version to index (fresh, or the last good one), if any.
type loadResult struct {
	entry   loaded
	subdirs []string
	problem *Problem
}

// loadCached loads the skill in dir, reusing the previous load when the
// directory's fingerprint is unchanged, and falling back to the previous
// load when the directory is now broken. It only reads old, so it may run
// concurrently.
func (r *Registry) loadCached(old *snapshot, dir string) loadResult {
	fp, subdirs, err := fingerprint(dir)
	prev, hadPrev := old.byDir[dir]
	if err == nil && hadPrev && prev.fp == fp {
		return loadResult{entry: prev, subdirs: subdirs}
	}
	var s *Skill
	if err == nil {
		s, err = LoadDir(dir, LoadOptions{AllowExtensions: r.opts.AllowExtensions, Lenient: true})
	}
	if err != nil {
		if hadPrev {
			// Keep the old fingerprint so the next reload tries again.
			return loadResult{entry: prev, subdirs: subdirs, problem: &Problem{Path: dir,
				Err: fmt.Errorf("%w; keeping the last good version (%s)", err, prev.skill.Digest)}}
		}
		return loadResult{subdirs: subdirs, problem: &Problem{Path: dir, Err: err}}
	}
	for _, w := range s.Warnings {
		r.log.Debug("skill warning", "name", s.Name, "path", dir, "warning", w)
	}
	if fm, ok := s.Properties["name"].(string); ok && NormalizeName(fm) != s.Name {
		r.log.Warn("skill's frontmatter name differs from its directory name; indexed under the directory name only", "name", s.Name, "frontmatter_name", fm, "path", dir)
	}
	return loadResult{entry: loaded{skill: s, fp: fp}, subdirs: subdirs}
}

// scanRoot finds skill directories (those holding SKILL.md) under root,
// skipping dot-directories and node_modules, never below MaxDepth, and at
// most limit of them. It also returns the directories to watch for new
// skills (for a root that does not exist yet, its nearest existing parent,
// so the root is picked up when it is created) and problems.
func (r *Registry) scanRoot(root string, limit int) (dirs, watch []string, probs []Problem) {
	st, err := os.Stat(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			r.log.Debug("skill root does not exist (yet)", "root", root)
			for p := filepath.Dir(root); ; p = filepath.Dir(p) {
				if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					return nil, []string{p}, nil
				}
				if p == filepath.Dir(p) {
					return nil, nil, nil
				}
			}
		}
		return nil, nil, []Problem{{Path: root, Err: fmt.Errorf("skill root: %w", err)}}
	}
	if !st.IsDir() {
		return nil, nil, []Problem{{Path: root, Err: fmt.Errorf("skill root is not a directory")}}
	}
	// seen stops symlink loops and the same skill reached twice. A skill
	// directory is known by its name too: the same directory linked in
	// under another name is another name (indexed as such), never a
	// reason to skip the first one found in sort order.
	type seenKey struct {
		dev, ino uint64
		name     string
	}
	seen := map[seenKey]bool{}
	maxDirs := 10*r.opts.MaxSkills + 1000
	visited := 0
	full := false
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if full {
			return
		}
		visited++
		if visited > maxDirs {
			full = true
			probs = append(probs, Problem{Path: root, Err: errkind.Errorf(ErrTooLarge, "more than %d directories under the root; point the root at the directory that holds the skills", maxDirs)})
			return
		}
		if isSkillDir(dir) {
			if len(dirs) >= limit {
				full = true
				probs = append(probs, Problem{Path: dir, Err: errkind.Errorf(ErrTooLarge, "more than %d skills; raise the limit or remove skills", r.opts.MaxSkills)})
				return
			}
			dirs = append(dirs, dir)
			return
		}
		watch = append(watch, dir)
		if depth >= r.opts.MaxDepth {
			return
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			probs = append(probs, Problem{Path: dir, Err: fmt.Errorf("reading skill root: %w", err)})
			return
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || name == "node_modules" {
				continue
			}
			child := filepath.Join(dir, name)
			if e.Type()&os.ModeSymlink != 0 || e.IsDir() {
				fi, err := os.Stat(child) // symlinked skill dirs are common
				if err != nil || !fi.IsDir() {
					continue
				}
				if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
					id := seenKey{dev: uint64(sys.Dev), ino: uint64(sys.Ino)}
					if isSkillDir(child) {
						id.name = NormalizeName(name)
					}
					if seen[id] {
						continue // symlink loop or the same skill twice
					}
					seen[id] = true
				}
				walk(child, depth+1)
			}
		}
	}
	walk(root, 0)
	return dirs, watch, probs
}

func isSkillDir(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, "SKILL.md"))
	return err == nil && !fi.IsDir()
}

// Watch keeps the index current until ctx is done, reloading shortly after
// any change under the roots (fsnotify, debounced), and polling where
// notifications are unavailable. It returns nil when ctx is cancelled.
func (r *Registry) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		r.log.Warn("file notifications unavailable; polling for skill changes", "interval", r.opts.PollInterval, "error", err)
		w = nil
	}
	polling := w == nil
	// syncWatches makes the watch set match the last reload and reports
	// how many directories it newly watches.
	syncWatches := func() int {
		if w == nil {
			return 0
		}
		st := r.state.Load()
		want := make(map[string]bool, len(st.watch))
		for _, d := range st.watch {
			want[d] = true
		}
		// Ask the watcher what it watches: inotify drops the watch of a
		// deleted directory by itself, and a recreated one must be re-added.
		watched := map[string]bool{}
		for _, d := range w.WatchList() {
			if want[d] {
				watched[d] = true
			} else {
				_ = w.Remove(d)
			}
		}
		failed, added := false, 0
		for d := range want {
			if watched[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				if !polling && !failed {
					r.log.Warn("cannot watch a skill directory; polling instead (raise fs.inotify.max_user_watches?)", "path", d, "error", err)
				}
				failed = true
				continue
			}
			added++
		}
		polling = failed
		return added
	}
	// Watch what the last reload saw, then reload so nothing that changed
	// in between is missed, then pick up directories that appeared.
	syncWatches()
	if err := r.Reload(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	syncWatches()

	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	ticker := time.NewTicker(r.opts.PollInterval)
	defer ticker.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	pending := false
	var firstEvent time.Time
	reload := func() {
		pending = false
		if err := r.Reload(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("skill reload failed", "error", err)
		}
		// Files written into a new directory before its watch existed
		// produced no event: look once more.
		if syncWatches() > 0 {
			pending, firstEvent = true, time.Now()
			debounce.Reset(r.opts.Debounce)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				polling = true
				continue
			}
			r.log.Trace("file event", "path", ev.Name, "op", ev.Op.String())
			now := time.Now()
			if !pending {
				pending, firstEvent = true, now
			}
			// Wait for the burst to settle, but never more than 5 debounces.
			wait := r.opts.Debounce
			if rest := firstEvent.Add(5 * r.opts.Debounce).Sub(now); rest < wait {
				wait = max(rest, 0)
			}
			debounce.Reset(wait)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.log.Warn("file notification error; rescanning", "error", err)
			reload()
		case <-debounce.C:
			reload()
		case <-ticker.C:
			if polling {
				reload()
			}
		}
	}
}

func diff(old, next map[string]*Skill) (added, changed, removed []string) {
	for name, s := range next {
		prev, ok := old[name]
		switch {
		case !ok:
			added = append(added, name)
		case prev.Digest != s.Digest || prev.Dir != s.Dir:
			changed = append(changed, name)
		}
	}
	for name := range old {
		if _, ok := next[name]; !ok {
			removed = append(removed, name)
		}
	}
	sort.Strings(added)
	sort.Strings(changed)
	sort.Strings(removed)
	return
}

func logNames(log hclog.Logger, msg string, names []string) {
	const maxLines = 20
	for i, n := range names {
		if i == maxLines {
			log.Info(msg+" (more)", "count", len(names)-maxLines)
			return
		}
		log.Info(msg, "name", n)
	}
}

// closest suggests an indexed name within edit distance 2 of name.
func closest(name string, skills []*Skill) string {
	best, bestD := "", 3
	for _, s := range skills {
		if d := editDistance(name, s.Name, bestD); d < bestD {
			best, bestD = s.Name, d
		}
	}
	return best
}

// editDistance is Levenshtein distance over runes, giving up (returning
// limit) once every alignment costs at least limit.
func editDistance(a, b string, limit int) int {
	ra, rb := []rune(a), []rune(b)
	if d := len(ra) - len(rb); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(rb)], limit)
}
