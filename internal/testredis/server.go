package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server process with AOF on, in a temporary
// directory on a random port, for tests that kill and restart Redis. The
// port and data directory stay the same across Restart, so clients
// reconnect to the same data.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	// args replace the durability defaults (AOF fsync always) and add
	// cluster or Sentinel settings; conf is a config file to start from.
	args []string
	conf string

	mu     sync.Mutex // protects the fields below
	cmd    *exec.Cmd
	exited chan error // receives the process's exit; closed after
}

// Start starts a private redis-server for tb and stops it at cleanup. The
// AOF is fsynced on every write ("always"), so a killed server loses nothing
// it acknowledged and the test is deterministic. When redis-server is not
// installed it skips tb, or fails it under CI=true.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(tb, "redis-server is not installed; run deploy/redis.sh to install it")
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir()}
	var lastErr error
	// A free port can be taken between the probe and the start; retry.
	for range 5 {
		s.port, err = freePort()
		if err != nil {
			tb.Fatalf("testredis: free port: %v", err)
		}
		if lastErr = s.start(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		tb.Fatalf("testredis: start redis-server: %v", lastErr)
	}
	tb.Cleanup(func() { s.Kill() })
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/" }

// Client returns a new client for the server, closed at cleanup. Its dial
// and retry settings are short so tests see an outage quickly.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:         s.Addr(),
		DialTimeout:  500 * time.Millisecond,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   1,
	})
	s.tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Running reports whether the process is up (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Kill stops the server with SIGKILL, as a crash would, and waits for the
// process to exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again on the same port and data directory (it
// reloads the AOF). It kills a running server first.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	var err error
	// The old socket can linger for a moment; retry the bind briefly.
	for range 20 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("testredis: restart redis-server: %v", err)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var argv []string
	if s.conf != "" {
		argv = append(argv, s.conf)
	}
	argv = append(argv,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	if s.args == nil {
		argv = append(argv, "--appendonly", "yes", "--appendfsync", "always", "--save", "")
	}
	cmd := exec.Command(s.bin, append(argv, s.args...)...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); close(exited) }()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited: %v\n%s", err, tail(log, 800))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer within 5s", s.port)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
