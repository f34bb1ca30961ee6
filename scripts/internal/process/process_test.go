package process

import (
	"os"
	"strconv"
	"sync"
	"testing"
)

func TestStatFields(t *testing.T) {
	f, err := StatFields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Field 4 (index 1) is the parent's pid.
	if len(f) < 20 || f[1] != strconv.Itoa(os.Getppid()) {
		t.Errorf("StatFields = %q, want the parent pid %d at index 1", f, os.Getppid())
	}
	if _, err := StatFields(-1); err == nil {
		t.Error("StatFields(-1) succeeded")
	}
}

func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			b.Write([]byte("ab"))
		}
	}()
	for range 100 {
		_ = b.String()
	}
	wg.Wait()
	if b.Len() != 200 || len(b.String()) != 200 {
		t.Errorf("Len = %d, want 200", b.Len())
	}
}
