package pgtest

import (
	"context"
	"testing"
	"time"
)

func TestStartExecRestart(t *testing.T) {
	s := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Exec(ctx, "postgres", "CREATE TABLE t(x int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx, "postgres", "SELECT x FROM t"); err != nil {
		t.Fatalf("Exec after restart = %v; want nil", err)
	}
}
