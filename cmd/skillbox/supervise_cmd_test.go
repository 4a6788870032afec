package main

import (
	"strings"
	"testing"
)

// TestJobConfinementFlags: the supervise flags give the confinement asked
// for or refuse; never less than was asked.
func TestJobConfinementFlags(t *testing.T) {
	for _, tc := range []struct {
		name           string
		uid, gid       int
		gidSet, netns  bool
		wantUID, wantG int // 0: no confinement
		wantErr        string
	}{
		{name: "off"},
		{name: "uid", uid: 65534, wantUID: 65534, wantG: 65534},
		{name: "uid and gid", uid: 65534, gid: 65533, gidSet: true, netns: true, wantUID: 65534, wantG: 65533},
		{name: "netns without uid", netns: true, wantErr: "set --job-uid"},
		{name: "gid without uid", gid: 5, gidSet: true, wantErr: "set --job-uid"},
		{name: "root gid", uid: 65534, gid: 0, gidSet: true, wantErr: "gid 0"},
		{name: "negative uid", uid: -2, wantErr: "uid -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := jobConfinement(tc.uid, tc.gid, tc.netns, "/work", tc.gidSet)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantUID == 0 {
				if c != nil {
					t.Fatalf("confinement %+v, want none", c)
				}
				return
			}
			if c == nil || c.UID != tc.wantUID || c.GID != tc.wantG || c.NetNS != tc.netns || c.WorkDir != "/work" {
				t.Fatalf("confinement %+v", c)
			}
		})
	}
}
