package audit

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
)

// forEachLine calls fn for each line of the file at path, starting at byte
// off: the line without its "\n", the line's offset, and whether it ended in
// "\n" (only the last one can be incomplete). line is valid only during fn.
// It returns the offset just past the last complete line.
func forEachLine(path string, off int64, fn func(line []byte, at int64, complete bool) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return off, err
	}
	defer f.Close()
	if off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return off, err
		}
	}
	br := bufio.NewReaderSize(f, 256<<10)
	var long []byte
	pos := off
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if long != nil {
			long = append(long, chunk...)
			line = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return pos, err
		}
		if len(line) > 0 {
			complete := line[len(line)-1] == '\n'
			body := line
			if complete {
				body = line[:len(line)-1]
			}
			if ferr := fn(body, pos, complete); ferr != nil {
				return pos, ferr
			}
			if complete {
				pos += int64(len(line))
			}
		}
		long = nil
		if err != nil {
			return pos, nil
		}
	}
}

// fileEnds reads the first and the last complete line of a file of the given
// size, and what follows the last "\n" (a torn write). good is the offset just
// past the last "\n" (0 when there is none); first and last are nil when the
// file holds no complete line.
func fileEnds(f io.ReaderAt, size int64) (first, last []byte, good int64, torn []byte, err error) {
	if size == 0 {
		return nil, nil, 0, nil, nil
	}
	// Last "\n" in the file.
	nl, err := lastIndexBefore(f, size)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	good = nl + 1
	torn = make([]byte, size-good)
	if _, err := f.ReadAt(torn, good); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, 0, nil, err
	}
	if nl < 0 {
		return nil, nil, 0, torn, nil
	}
	prev, err := lastIndexBefore(f, nl)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	last = make([]byte, nl-(prev+1))
	if _, err := f.ReadAt(last, prev+1); err != nil {
		return nil, nil, 0, nil, err
	}
	if prev < 0 {
		return last, last, good, torn, nil
	}
	first, err = firstLine(f, good)
	return first, last, good, torn, err
}

// lastIndexBefore returns the offset of the last "\n" before end, or -1.
func lastIndexBefore(f io.ReaderAt, end int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		start := end - n
		if _, err := f.ReadAt(buf[:n], start); err != nil && !errors.Is(err, io.EOF) {
			return -1, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i), nil
		}
		end = start
	}
	return -1, nil
}

// firstLine returns the first line (without "\n") of the first limit bytes.
func firstLine(f io.ReaderAt, limit int64) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for off := int64(0); off < limit; {
		n := int64(len(buf))
		if n > limit-off {
			n = limit - off
		}
		if _, err := f.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return append(out, buf[:i]...), nil
		}
		out = append(out, buf[:n]...)
		off += n
	}
	return out, nil
}
