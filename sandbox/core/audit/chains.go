package audit

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
)

// Chain is one hash chain in an audit directory: the directory itself (the
// log of a daemon that names no replica, or of one before replicas) or one
// of its subdirectories (the chain of the replica it is named after). Each
// chain has exactly one writer (the lock), so replicas never share one.
type Chain struct {
	// Name is the subdirectory's name, "" for the chain in the directory
	// itself.
	Name string `json:"name"`
	Dir  string `json:"dir"`
}

// Label is how reports name the chain.
func (c Chain) Label() string {
	if c.Name == "" {
		return "."
	}
	return c.Name
}

// ReplicaDir is where the replica named replica (see replicaname.Check)
// writes its chain under the audit directory root.
func ReplicaDir(root, replica string) string { return filepath.Join(root, replica) }

// Chains lists the chains under root: root itself if it holds log files,
// then each subdirectory that does, by name. Deeper directories are not
// looked at. A missing root holds none.
func Chains(root string) ([]Chain, error) {
	var out []Chain
	files, err := listFiles(root)
	if err != nil {
		return nil, err
	}
	if len(files) > 0 {
		out = append(out, Chain{Dir: root})
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(root, e.Name())
		files, err := listFiles(d)
		if err != nil {
			return nil, err
		}
		if len(files) > 0 {
			out = append(out, Chain{Name: e.Name(), Dir: d})
		}
	}
	return out, nil
}

// chainNames lists the chains' labels for messages.
func chainNames(cs []Chain) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Label()
	}
	return strings.Join(names, ", ")
}

// ChainResult is the verification of one chain.
type ChainResult struct {
	Chain
	Report *Report `json:"report,omitempty"`
	// Failure is the first record that is not as written; Err a problem
	// that kept the chain from being checked (I/O). Both nil: intact.
	Failure *TamperError `json:"failure,omitempty"`
	Err     error        `json:"-"`
}

// OK reports whether the chain verified.
func (r *ChainResult) OK() bool { return r.Failure == nil && r.Err == nil }

// VerifyAll verifies every chain under root (see Chains) on its own, as
// Verify does one. A checkpoints file (VerifyOptions.Checkpoints) may hold
// the checkpoints of several chains: each chain must match those of its own
// log id, and a checkpoint of a log id no chain has is a *TamperError
// (ReasonLogReplaced) returned as the error, after the results. Results are
// in Chains order; ErrNoLog when root holds no chain.
func VerifyAll(root string, opts VerifyOptions) ([]ChainResult, error) {
	chains, err := Chains(root)
	if err != nil {
		return nil, err
	}
	ext, err := loadCheckpoints(opts)
	if err != nil {
		return nil, err
	}
	if len(chains) == 0 {
		if len(ext) > 0 {
			return nil, &TamperError{Seq: 1, Reason: ReasonTruncated, Detail: fmt.Sprintf("no log files in %s, but a checkpoint vouches for log %s seq %d", root, ext[len(ext)-1].LogID, ext[len(ext)-1].Seq)}
		}
		return nil, fmt.Errorf("%w in %s (nor in its subdirectories)", ErrNoLog, root)
	}
	out := make([]ChainResult, len(chains))
	ids := map[string]bool{}
	for i, c := range chains {
		res := ChainResult{Chain: c}
		res.Report, res.Err = verifyChain(c.Dir, opts, ext, len(chains) > 1)
		if te := (*TamperError)(nil); errors.As(res.Err, &te) {
			res.Failure, res.Err = te, nil
		}
		if res.Report != nil && res.Report.LogID != "" {
			ids[res.Report.LogID] = true
		}
		out[i] = res
	}
	if len(chains) > 1 {
		for _, c := range ext {
			if !ids[c.LogID] {
				return out, &TamperError{Seq: c.Seq, Reason: ReasonLogReplaced, File: opts.Checkpoints,
					Detail: fmt.Sprintf("a checkpoint vouches for log %s seq %d, but no chain in %s has that log id (chains: %s)", c.LogID, c.Seq, root, chainNames(chains))}
			}
		}
	}
	return out, nil
}

// Records of several chains merge by time; ties go by replica (the chain's
// name for records without one), then seq, then chain order.
func entryCmp(a, b *Entry) int {
	if c := a.Record.Time.Compare(b.Record.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(a.replica(), b.replica()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Record.Seq, b.Record.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.chainIdx, b.chainIdx)
}

func (e *Entry) replica() string {
	if e.Record.Replica != "" {
		return e.Record.Replica
	}
	return e.Chain
}

// chainEntries yields the complete records of one chain in log order.
func chainEntries(c Chain, idx int) iter.Seq2[*Entry, error] {
	return func(yield func(*Entry, error) bool) {
		files, err := listFiles(c.Dir)
		if err != nil {
			yield(nil, err)
			return
		}
		for _, f := range files {
			_, err := scanFile(f, 0, func(e *Entry) error {
				e.Chain, e.chainIdx = c.Name, idx
				if !yield(e, nil) {
					return ErrStop
				}
				return nil
			})
			if errors.Is(err, ErrStop) {
				return
			}
			if err != nil {
				if c.Name != "" {
					err = fmt.Errorf("chain %s: %w", c.Name, err)
				}
				yield(nil, err)
				return
			}
		}
	}
}

// scanMerged calls fn for the records of all chains, merged by time (see
// entryCmp). Every chain's own order is kept even where its clock went
// back: only the chains' next records are compared.
func scanMerged(chains []Chain, fn func(*Entry) error) error {
	type head struct {
		next func() (*Entry, error, bool)
		stop func()
		e    *Entry
	}
	heads := make([]*head, 0, len(chains))
	defer func() {
		for _, h := range heads {
			h.stop()
		}
	}()
	advance := func(h *head) (bool, error) {
		e, err, ok := h.next()
		if !ok {
			h.e = nil
			return false, nil
		}
		if err != nil {
			return false, err
		}
		h.e = e
		return true, nil
	}
	for i, c := range chains {
		next, stop := iter.Pull2(chainEntries(c, i))
		h := &head{next: next, stop: stop}
		heads = append(heads, h)
		if _, err := advance(h); err != nil {
			return err
		}
	}
	for {
		var min *head
		for _, h := range heads {
			if h.e != nil && (min == nil || entryCmp(h.e, min.e) < 0) {
				min = h
			}
		}
		if min == nil {
			return nil
		}
		if err := fn(min.e); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
		if _, err := advance(min); err != nil {
			return err
		}
	}
}

// chainsIn is Chains, with ErrNoLog when root holds none.
func chainsIn(root string) ([]Chain, error) {
	cs, err := Chains(root)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoLog, root)
	}
	return cs, nil
}
