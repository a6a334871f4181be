package claim

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tetherjobs/tether/internal/store"
)

// spillFile holds a resumable runner's output on disk while it waits for
// the runner's next checkpoint or end. Held output must not be stored
// before then (exactly-once: see logFlusher), and must not stay in memory
// past the runner's share of the output budget. The file is the process's
// own: it is removed when the runner ends, and a process that dies leaves
// only output that belongs to whoever resumes the job, who reads it again
// from the remote side.
type spillFile struct {
	f     *os.File
	bytes int // data bytes it holds
	recs  int
}

// spillHeader is a record's header: seq, stream, receive time (Unix ns),
// data length.
const spillHeader = 8 + 1 + 8 + 4

func createSpill(dir string) (*spillFile, error) {
	f, err := os.CreateTemp(dir, "tether-held-output-*")
	if err != nil {
		return nil, fmt.Errorf("creating a file for held job output: %w", err)
	}
	return &spillFile{f: f}, nil
}

// write appends recs.
func (s *spillFile) write(recs []store.LogRecord) error {
	w := bufio.NewWriterSize(s.f, 64<<10)
	var h [spillHeader]byte
	for _, r := range recs {
		binary.LittleEndian.PutUint64(h[0:], uint64(r.Seq))
		h[8] = byte(streamOf(r.Stream))
		binary.LittleEndian.PutUint64(h[9:], uint64(r.At.UnixNano()))
		binary.LittleEndian.PutUint32(h[17:], uint32(len(r.Data)))
		if _, err := w.Write(h[:]); err != nil {
			return fmt.Errorf("spilling held job output: %w", err)
		}
		if _, err := w.Write(r.Data); err != nil {
			return fmt.Errorf("spilling held job output: %w", err)
		}
		s.bytes += len(r.Data)
		s.recs++
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("spilling held job output: %w", err)
	}
	return nil
}

// readAll returns the records the file holds, in write order, and empties
// it.
func (s *spillFile) readAll() ([]store.LogRecord, error) {
	if s.recs == 0 {
		return nil, nil
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("reading held job output back: %w", err)
	}
	r := bufio.NewReaderSize(s.f, 64<<10)
	out := make([]store.LogRecord, 0, s.recs)
	var h [spillHeader]byte
	for range s.recs {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil, fmt.Errorf("reading held job output back: %w", err)
		}
		rec := store.LogRecord{Seq: int64(binary.LittleEndian.Uint64(h[0:])), Stream: stream(h[8]).String(),
			At: time.Unix(0, int64(binary.LittleEndian.Uint64(h[9:])))}
		rec.Data = make([]byte, binary.LittleEndian.Uint32(h[17:]))
		if _, err := io.ReadFull(r, rec.Data); err != nil {
			return nil, fmt.Errorf("reading held job output back: %w", err)
		}
		out = append(out, rec)
	}
	return out, s.reset()
}

// reset empties the file.
func (s *spillFile) reset() error {
	s.bytes, s.recs = 0, 0
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("emptying held job output: %w", err)
	}
	_, err := s.f.Seek(0, io.SeekStart)
	return err
}

// remove deletes the file.
func (s *spillFile) remove() error {
	return errors.Join(s.f.Close(), os.Remove(s.f.Name()))
}

// streamOf is the stream named name.
func streamOf(name string) stream {
	if name == stderrStream.String() {
		return stderrStream
	}
	return stdoutStream
}
