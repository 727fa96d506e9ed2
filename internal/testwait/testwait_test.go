package testwait

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	tries := 0
	err := Poll("the third try", 10*time.Second, func() error {
		if tries++; tries < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Errorf("Poll = %v after %d tries; want nil after 3", err, tries)
	}
}

func TestPollNamesTheLastError(t *testing.T) {
	last := errors.New("queue depth 7")
	tries := 0
	err := Poll("the queue to drain", 20*time.Millisecond, func() error {
		if tries++; tries == 1 {
			return errors.New("first")
		}
		return last
	})
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "the queue to drain") {
		t.Errorf("Poll = %v; want it to name what it waited for and wrap %v", err, last)
	}
}

// fakeTB records a Fatal instead of stopping the test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Fatal(args ...any) { f.fatal = args[0].(error).Error() }
func (f *fakeTB) Name() string      { return "fake" }

func TestForFailsWithTheReason(t *testing.T) {
	tb := &fakeTB{}
	For(tb, "a listener to close", 10*time.Millisecond, func() error { return errors.New("still accepting") })
	if !strings.Contains(tb.fatal, "a listener to close") || !strings.Contains(tb.fatal, "still accepting") {
		t.Errorf("For failed with %q; want what and the last error", tb.fatal)
	}
}
