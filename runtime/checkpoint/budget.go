package checkpoint

import (
	"fmt"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// fmtBytes renders n in the largest binary unit it reaches.
func fmtBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n)/1024, 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[u])
}

// Reserve sets n more bytes aside for the checkpoint, or refuses them with
// an ErrBudgetExceeded error naming the budget they would pass, what uses
// it and the key that sets it: call it with what a walk of the tree to
// copy found (Measure) before copying it.
func (p *Pending) Reserve(n int64) error {
	if n <= 0 {
		return nil
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.done {
		return fmt.Errorf("checkpoint %s: already committed or aborted", p.id)
	}
	if err := p.s.fits(p, n); err != nil {
		return err
	}
	p.reserved += n
	return nil
}

// Charge counts n bytes about to be written into the checkpoint: within
// what was reserved, or reserving more (CopyOptions.Charge). A copy that
// passes the budgets stops at once, whatever was reserved before.
func (p *Pending) Charge(n int64) error {
	if n <= 0 {
		return nil
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.done {
		return fmt.Errorf("checkpoint %s: already committed or aborted", p.id)
	}
	if over := p.spent + n - p.reserved; over > 0 {
		if err := p.s.fits(p, over); err != nil {
			return err
		}
		p.reserved += over
	}
	p.spent += n
	return nil
}

// Reserved is what the checkpoint has reserved so far, in bytes.
func (p *Pending) Reserved() int64 {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.reserved
}

// reserveTo makes what the checkpoint reserved at least n.
func (p *Pending) reserveTo(n int64) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if more := n - p.reserved; more > 0 {
		if err := p.s.fits(p, more); err != nil {
			return err
		}
		p.reserved += more
	}
	return nil
}

// fits says whether pending p may take n bytes more than it reserved:
// within its session's, its uid's and the total budget, the disk share,
// and above the filesystem's MinFree. Its error names the budget, what
// uses it and what to do. s.mu is held.
func (s *Store) fits(p *Pending, n int64) error {
	if n <= 0 {
		return nil
	}
	a := p.acct
	var total, sess, uid, unspent int64
	var count, uidCount int
	add := func(k Account, bytes int64) {
		total += bytes
		count++
		if a.Session != "" && k.Session == a.Session {
			sess += bytes
		}
		if a.HasUID && k.HasUID && k.UID == a.UID {
			uid += bytes
			uidCount++
		}
	}
	for _, k := range s.kept {
		add(k.acct, k.bytes)
	}
	for q := range s.pending {
		if q != p {
			add(q.acct, q.reserved)
			count--
			unspent += q.reserved - q.spent
		}
	}
	need := p.reserved + n
	what := "checkpoint " + p.id
	if a.Session != "" {
		what += " of session " + a.Session
	}
	fix := "delete files the session no longer needs from its /work (sparse files count at their length, each hard link once), close or resume sessions you no longer need paused"
	l := s.lim
	switch {
	case l.PerSession > 0 && a.Session != "" && sess+need > l.PerSession:
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the session's other checkpoints use %s of its %s budget: %s, or raise %s",
			what, fmtBytes(need), fmtBytes(sess), fmtBytes(l.PerSession), fix, BudgetPerSessionKey)
	case l.PerUID > 0 && a.HasUID && uid+need > l.PerUID:
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the %d other checkpoints of uid %d use %s of its %s budget: %s, or raise %s",
			what, fmtBytes(need), uidCount, a.UID, fmtBytes(uid), fmtBytes(l.PerUID), fix, BudgetPerUIDKey)
	case l.Total > 0 && total+need > l.Total:
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the %d checkpoints kept already use %s of the %s budget: %s, end or fork fewer sessions, or raise %s",
			what, fmtBytes(need), count, fmtBytes(total), fmtBytes(l.Total), fix, BudgetKey)
	}
	if l.DiskPercent == 0 && l.MinFree == 0 {
		return nil
	}
	size, free, err := s.statfs(s.dir)
	if err != nil {
		return errkind.Errorf(ErrBudgetExceeded, "%s: cannot read the free space of %s's filesystem, so no checkpoint is written: %w", what, s.dir, err)
	}
	if share := size / 100 * int64(l.DiskPercent); l.DiskPercent > 0 && total+need > share {
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the %d checkpoints kept already use %s of the %d%% (%s) of %s's filesystem they may take: %s, or raise %s",
			what, fmtBytes(need), count, fmtBytes(total), l.DiskPercent, fmtBytes(share), s.dir, fix, DiskPercentKey)
	}
	if left := free - unspent - n; l.MinFree > 0 && left < l.MinFree {
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s more, and %s's filesystem has %s free (%s of it promised to checkpoints being written): it would leave less than the %s the audit log needs (%s): free disk space or %s",
			what, fmtBytes(n), s.dir, fmtBytes(free), fmtBytes(unspent), fmtBytes(l.MinFree), MinFreeKey, fix)
	}
	return nil
}
