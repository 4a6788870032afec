package service

import (
	"sort"
	"sync/atomic"
)

// OpenSessionWorkspaces are the sessions whose workspace the files API
// keeps open.
func OpenSessionWorkspaces(s *Service) []string {
	s.wsOpen.mu.Lock()
	defer s.wsOpen.mu.Unlock()
	ids := make([]string, 0, len(s.wsOpen.open))
	for id := range s.wsOpen.open {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// CountWorkspaceOpens counts the session workspaces the files API of s
// opens from now on (each one walked once for a quota); call it before s
// is used.
func CountWorkspaceOpens(s *Service) *atomic.Int64 {
	var n atomic.Int64
	s.wsOpen.opened = func(string) { n.Add(1) }
	return &n
}

// AuditIndexed is how many records the audit index of s holds now.
func AuditIndexed(s *Service) int {
	s.auditMu.Lock()
	ri := s.auditIdx
	s.auditMu.Unlock()
	if ri == nil {
		return 0
	}
	ri.x.mu.RLock()
	defer ri.x.mu.RUnlock()
	return len(ri.x.entries)
}
