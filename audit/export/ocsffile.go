package export

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// OCSFFile is the sink that appends OCSF events, one JSON object per
// line, to a file or to standard output.
type OCSFFile struct {
	f    *os.File
	w    *bufio.Writer
	sync bool
	name string
}

// NewOCSFFile opens path for appending ("-" is stdout). A file is synced
// after every batch, so the cursor never runs ahead of what is on disk.
func NewOCSFFile(path string, stdout *os.File) (*OCSFFile, error) {
	if path == "-" {
		return &OCSFFile{f: stdout, w: bufio.NewWriter(stdout), name: "stdout"}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit.export.ocsf: %w", err)
	}
	if err := dropTornLine(f); err != nil {
		f.Close() //nolint:errcheck // the repair failed; that error is returned
		return nil, fmt.Errorf("audit.export.ocsf %s: %w", path, err)
	}
	return &OCSFFile{f: f, w: bufio.NewWriter(f), sync: true, name: path}, nil
}

// dropTornLine cuts an unterminated last line, left by a crash in the
// middle of a write: that batch was not acknowledged, so the cursor still
// points before it and it is written again whole.
func dropTornLine(f *os.File) error {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	// Scan back from the end for the last newline, a block at a time.
	var buf [4096]byte
	end := fi.Size()
	for off := end; off > 0; {
		n := int64(len(buf))
		if off < n {
			n = off
		}
		off -= n
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			if off+int64(i)+1 == end {
				return nil
			}
			return f.Truncate(off + int64(i) + 1)
		}
	}
	return f.Truncate(0)
}

// Name implements Sink.
func (o *OCSFFile) Name() string { return "ocsf" }

// Export writes the batch's events and syncs them.
func (o *OCSFFile) Export(_ context.Context, batch []Event) error {
	if err := WriteOCSF(o.w, batch); err != nil {
		return fmt.Errorf("write %s: %w", o.name, err)
	}
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", o.name, err)
	}
	if o.sync {
		if err := o.f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", o.name, err)
		}
	}
	return nil
}

// WriteOCSF writes each event as one line of OCSF JSON.
func WriteOCSF(w io.Writer, batch []Event) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range batch {
		if err := enc.Encode(MapOCSF(&batch[i])); err != nil {
			return err
		}
	}
	return nil
}

// Close flushes and closes the file (stdout is left open).
func (o *OCSFFile) Close(context.Context) error {
	err := o.w.Flush()
	if o.sync {
		if cerr := o.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
