package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// The process name is what the caller chose to call itself;
// records must say so.
func TestPeerProcessMarkedClaimed(t *testing.T) {
	b, err := json.Marshal(Peer{UID: 1, GID: 1, PID: 2, Process: "approver"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"process_claimed":"approver"`) || strings.Contains(string(b), `"process":`) {
		t.Fatalf("peer encodes as %s; the process name must be marked as claimed", b)
	}
	// Old records still decode.
	var p Peer
	if err := json.Unmarshal([]byte(`{"uid":1,"gid":1,"pid":2,"process":"old"}`), &p); err != nil || p.Process != "old" {
		t.Fatalf("old record: %+v %v", p, err)
	}
}
