package cluster

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/specgate/specgate/engine"
)

// Session warmth across processes. A gateway's sockets say which sessions
// they use (engine.SessionWarmer); the client passes that on to every
// engine on the warmth channel, at once when a session turns live or idle
// and, for every live one, again each HeartbeatInterval. Pub/sub loses
// messages while a connection is down, so an engine holds a session live
// only until its HeartbeatTTL passes without word of it: a lost "idle" or
// a dead gateway cannot pin a prefix on the device for ever. Every engine
// hears it all; only the one whose cache holds the session's prefix has
// anything to keep warm, the others remember the name until it goes idle.
//
// An engine keeps word per gateway: a session is live while any gateway
// holds it, so one gateway's "idle" (an old socket closing after its user
// reconnected through another gateway) does not cancel another's "live".

// warmthMsg is one message on the warmth channel.
type warmthMsg struct {
	// Gateway is the sender's node id ("": a gateway from before it was
	// sent, all of which count as one).
	Gateway string   `json:"g,omitempty"`
	Live    []string `json:"live,omitempty"`
	Idle    []string `json:"idle,omitempty"`
}

// announceBatch bounds the sessions of one re-announcement message.
const announceBatch = 512

// SetSessionLive tells the engines that a client of this gateway started
// (live) or stopped using session. Calls nest: a session stays live until
// as many idle calls as live ones came. It does not block on Redis.
func (c *Client) SetSessionLive(session string, live bool) {
	if session == "" {
		return
	}
	c.mu.Lock()
	n := c.warm[session]
	if live {
		c.warm[session] = n + 1
	} else if n > 1 {
		c.warm[session] = n - 1
	} else if n == 1 {
		delete(c.warm, session)
	}
	turned := live && n == 0 || !live && n == 1
	c.mu.Unlock()
	if !turned {
		return
	}
	m := warmthMsg{Gateway: c.o.ID, Live: []string{session}}
	if !live {
		m = warmthMsg{Gateway: c.o.ID, Idle: []string{session}}
	}
	select {
	case c.warmCh <- m:
	default:
		// The announcer is behind: a live session is re-announced within
		// HeartbeatInterval; an idle one expires on the engines.
	}
}

// announce publishes warmth changes as they come and every live session
// each HeartbeatInterval, until ctx ends.
func (c *Client) announce(ctx context.Context) {
	t := time.NewTicker(c.o.HeartbeatInterval)
	defer t.Stop()
	publish := func(m warmthMsg) {
		b, _ := json.Marshal(m)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = c.o.Redis.Publish(pctx, c.k.warmth(), b).Err() // lost: the next round repeats it
	}
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-c.warmCh:
			publish(m)
		case <-t.C:
			c.mu.Lock()
			live := make([]string, 0, len(c.warm))
			for s := range c.warm {
				live = append(live, s)
			}
			c.mu.Unlock()
			for len(live) > 0 {
				n := min(len(live), announceBatch)
				publish(warmthMsg{Gateway: c.o.ID, Live: live[:n]})
				live = live[n:]
			}
		}
	}
}

// warmth applies the gateways' warmth messages to the engine, when it
// keeps sessions warm, until ctx ends; sessions not re-announced within
// HeartbeatTTL go idle.
func (w *worker) warmth(ctx context.Context) {
	sw, ok := w.o.Engine.(engine.SessionWarmer)
	if !ok {
		return
	}
	msgs := make(chan string, 256)
	var wg sync.WaitGroup
	defer wg.Wait() // the listener ends with ctx
	wg.Go(func() {
		listen(ctx, w.o.Redis, w.k.warmth(), func(p string) {
			select {
			case msgs <- p:
			case <-ctx.Done():
			}
		})
	})
	// session → gateway → when its word runs out unless heard again
	live := map[string]map[string]time.Time{}
	drop := func(s, gw string) {
		if gws, ok := live[s]; ok {
			delete(gws, gw)
			if len(gws) == 0 {
				delete(live, s)
				sw.SetSessionLive(s, false)
			}
		}
	}
	t := time.NewTicker(w.o.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-msgs:
			var m warmthMsg
			if err := json.Unmarshal([]byte(p), &m); err != nil {
				w.log.Debug("cluster: bad warmth message", "err", err)
				continue
			}
			until := time.Now().Add(w.o.HeartbeatTTL)
			for _, s := range m.Live {
				if s == "" {
					continue
				}
				gws, ok := live[s]
				if !ok {
					gws = map[string]time.Time{}
					live[s] = gws
					sw.SetSessionLive(s, true)
				}
				gws[m.Gateway] = until
			}
			for _, s := range m.Idle {
				drop(s, m.Gateway)
			}
		case now := <-t.C:
			for s, gws := range live {
				for gw, until := range gws {
					if now.After(until) {
						drop(s, gw)
					}
				}
			}
		}
	}
}
