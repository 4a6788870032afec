package audit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// BenchmarkVerify10000 verifies a log of 10,000 runs: a start and an end
// record each (20,001 records with the genesis), shaped like the daemon's.
func BenchmarkVerify10000(b *testing.B) {
	dir := b.TempDir()
	fs := &faultFS{skipSync: true} // building the log is not what is measured
	l, err := openLog(dir, Options{Logger: quiet()}, fs, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < 10000; i += 8 {
				s, e := runPair(i)
				if err := l.Append(ctx, s); err != nil {
					b.Error(err)
					return
				}
				if err := l.Append(ctx, e); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	l.Close()
	var bytes int64
	files, _ := listFiles(dir)
	for _, f := range files {
		bytes += fileSize(b, f.Path)
	}
	b.SetBytes(bytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := Verify(dir, VerifyOptions{})
		if err != nil || rep.Records != 20001 {
			b.Fatalf("%v %+v", err, rep)
		}
	}
	b.ReportMetric(float64(bytes)/20001, "bytes/record")
}

// BenchmarkAppend appends run records one at a time (each waits for its
// fsync), and from many goroutines at once (appends share fsyncs).
func BenchmarkAppend(b *testing.B) {
	s, _ := runPair(1)
	b.Run("serial", func(b *testing.B) {
		l := openT(b, b.TempDir(), Options{})
		defer l.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := *s
			if err := l.Append(context.Background(), &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := openT(b, b.TempDir(), Options{})
		defer l.Close()
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r := *s
				if err := l.Append(context.Background(), &r); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("serial-nosync", func(b *testing.B) {
		// The CPU cost of an append without the disk: encoding, hashing,
		// the hand-off to the writer and the write itself.
		l, err := openLog(b.TempDir(), Options{Logger: quiet()}, &faultFS{skipSync: true}, time.Now)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := *s
			if err := l.Append(context.Background(), &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
