package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/skillbox/skillbox/sandbox/api"
)

// A host moves a directory into a session's workspace and back through
// the files API, one piece of a file per call (api.MaxWorkspaceChunk), so
// a file of any size crosses without sitting in one message. The host side
// is read and written inside an os.Root with no link followed: a symlink
// is skipped and named, never sent or written through.

// TransferReport is what UploadDir or DownloadDir moved.
type TransferReport struct {
	Files   int
	Bytes   int64
	Skipped []string // paths not moved, with why
}

// UploadDir writes every regular file under hostDir into the session's
// workspace under dest ("" for its top), replacing files of the same
// name. Symlinks and special files are skipped and named in the report.
func (c *Client) UploadDir(ctx context.Context, sessionID, hostDir, dest string) (*TransferReport, error) {
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	rep := &TransferReport{}
	buf := make([]byte, api.MaxWorkspaceChunk)
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." || d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: a %s, not uploaded", rel, FileKind(d.Type())))
			return nil
		}
		f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil || !info.Mode().IsRegular() {
			rep.Skipped = append(rep.Skipped, rel+": changed while it was read, not uploaded")
			return nil
		}
		name := path.Join(dest, rel)
		var off int64
		for first := true; ; first = false {
			n, rerr := io.ReadFull(f, buf)
			if n > 0 || first {
				res, err := c.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sessionID, Path: name, Offset: off,
					Data: buf[:n], Truncate: first, Mode: uint32(info.Mode().Perm())})
				if err != nil {
					return fmt.Errorf("upload %s: %w", rel, err)
				}
				off = res.Size
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				return fmt.Errorf("upload %s: %w", rel, rerr)
			}
		}
		rep.Files++
		rep.Bytes += off
		return nil
	})
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// DownloadDir writes every regular file of the session's workspace under
// src ("" for all of it) into hostDir (created when missing), at its path
// relative to src. Symlinks and special files in the workspace are
// skipped and named; nothing is written through a link on the host.
func (c *Client) DownloadDir(ctx context.Context, sessionID, src, hostDir string) (*TransferReport, error) {
	list, err := c.ListWorkspace(ctx, api.Peer{}, api.WorkspaceListParams{SessionID: sessionID, Path: src, Recursive: true, Limit: api.MaxWorkspaceList})
	if err != nil {
		return nil, err
	}
	if list.Truncated {
		return nil, fmt.Errorf("the workspace holds more than %d entries under %q: download a subdirectory at a time", api.MaxWorkspaceList, src)
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	rep := &TransferReport{}
	for _, e := range list.Entries {
		rel := e.Path
		if src != "" && path.Clean(src) != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(e.Path, path.Clean(src)+"/"); !ok {
				continue // src itself
			}
		}
		switch e.Type {
		case api.WorkspaceEntryDir:
			if err := root.MkdirAll(filepath.FromSlash(rel), 0o755); err != nil {
				return rep, err
			}
			continue
		case api.WorkspaceEntryFile:
		default:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: a %s, not downloaded", e.Path, e.Type))
			continue
		}
		if dir := path.Dir(rel); dir != "." {
			if err := root.MkdirAll(filepath.FromSlash(dir), 0o755); err != nil {
				return rep, err
			}
		}
		f, err := root.OpenFile(filepath.FromSlash(rel), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, fs.FileMode(e.Mode&0o777|0o600))
		if err != nil {
			return rep, err
		}
		var off int64
		for {
			piece, err := c.ReadWorkspace(ctx, api.Peer{}, api.WorkspaceReadParams{SessionID: sessionID, Path: e.Path, Offset: off})
			if err != nil {
				f.Close()
				return rep, fmt.Errorf("download %s: %w", e.Path, err)
			}
			if _, err := f.Write(piece.Data); err != nil {
				f.Close()
				return rep, err
			}
			off += int64(len(piece.Data))
			if piece.EOF || len(piece.Data) == 0 {
				break
			}
		}
		if err := f.Close(); err != nil {
			return rep, err
		}
		rep.Files++
		rep.Bytes += off
	}
	return rep, nil
}
