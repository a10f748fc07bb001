package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/gateway/generatortest"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// slowModel sleeps before each forward pass, so a cancel lands before a
// reply ends however fast the machine is.
type slowModel struct {
	model.Loaded
	delay time.Duration
}

func (m slowModel) Forward(kv kernels.KVCache, b *model.Batch) (kernels.Tensor, error) {
	time.Sleep(m.delay)
	return m.Loaded.Forward(kv, b)
}

// newEngine starts an engine on stories260K, slowed by delay per step.
func newEngine(t testing.TB, delay time.Duration) *engine.Engine {
	t.Helper()
	path := testmodels.Path(t, testmodels.Stories260K)
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	m, err := model.Load(path, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	eng, err := engine.New(slowModel{m, delay}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

var story = []engine.Message{{Role: "user", Content: "Once upon a time, there was a little girl"}}

// storyText is a raw prompt; storyTokens returns what stories260K's
// tokenizer makes of it.
const storyText = "Once upon a time, there was a little boy"

func storyTokens(t testing.TB) []int32 {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	m, err := model.Load(testmodels.Path(t, testmodels.Stories260K), be)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return m.Tokenizer().Encode(storyText)
}

func TestConformanceInProcess(t *testing.T) {
	generatortest.Run(t, generatortest.Config{
		Messages: story, Text: storyText, TextTokens: storyTokens(t),
		New: func(t *testing.T) engine.Generator {
			eng := newEngine(t, time.Millisecond)
			return eng
		},
	})
}

func TestConformanceRedis(t *testing.T) {
	generatortest.Run(t, generatortest.Config{
		Messages: story, Text: storyText, TextTokens: storyTokens(t),
		New: func(t *testing.T) engine.Generator {
			rdb := testredis.Client(t)
			prefix := testredis.Prefix(t)
			eng := newEngine(t, time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- cluster.RunEngine(ctx, cluster.EngineOptions{Redis: rdb, Prefix: prefix, ID: "e1",
					Engine: eng, Logger: quiet})
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("RunEngine: %v", err)
				}
			})
			c, err := cluster.NewClient(cluster.ClientOptions{Redis: rdb, Prefix: prefix, Logger: quiet, PollInterval: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			deadline := time.Now().Add(5 * time.Second)
			for c.Ready() != nil {
				if time.Now().After(deadline) {
					t.Fatalf("client not ready: %v", c.Ready())
				}
				time.Sleep(20 * time.Millisecond)
			}
			return c
		},
	})
}
