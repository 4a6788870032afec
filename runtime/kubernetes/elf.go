package kubernetes

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxInterp bounds the PT_INTERP segment read from a binary.
const maxInterp = 4096

// elfInterpreter is the dynamic loader an ELF executable names (its
// PT_INTERP), or "" for a static one.
func elfInterpreter(r io.ReaderAt) (string, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		if p.Filesz > maxInterp {
			return "", errors.New("its loader's name is too long")
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("its loader's name: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}
