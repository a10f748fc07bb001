package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cancels across gateways. A cancel frame names only a request, and the
// turn may run on another gateway of the deployment than the one the
// client's socket is on now (it reconnected, or resumed elsewhere). A
// gateway that does not run the request forwards the cancel on the
// gateway control channel; the gateway that runs it cancels it and
// acknowledges. Without an acknowledgement within ControlTimeout the
// request is not_found, as for a request of nobody's.

// controlMsg is one message on the gateway control channel.
type controlMsg struct {
	Op      string `json:"op"`           // "cancel" or "ack"
	ID      string `json:"id"`           // the cancel's nonce, echoed by its ack
	From    string `json:"from"`         // the gateway asking (cancel) or answering (ack)
	To      string `json:"to,omitempty"` // ack: the gateway that asked
	Tenant  string `json:"tenant,omitempty"`
	User    string `json:"user,omitempty"`
	Request string `json:"request,omitempty"`
}

// listenControl serves the control channel (ps, subscribed) until the
// server stops. A message lost while Redis is away costs one cancel, which
// the client can send again.
func (s *Server) listenControl(ps *redis.PubSub) {
	defer s.bg.Done()
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			var msg controlMsg
			if json.Unmarshal([]byte(m.Payload), &msg) != nil || msg.From == s.gwID {
				continue
			}
			switch msg.Op {
			case "cancel":
				if s.cancelLocal(msg.Tenant, msg.User, msg.Request) {
					s.publishControl(controlMsg{Op: "ack", ID: msg.ID, From: s.gwID, To: msg.From})
				}
			case "ack":
				if msg.To != s.gwID {
					continue
				}
				s.mu.Lock()
				if w, ok := s.ctlWaiters[msg.ID]; ok {
					delete(s.ctlWaiters, msg.ID)
					close(w)
				}
				s.mu.Unlock()
			}
		}
	}
}

func (s *Server) publishControl(msg controlMsg) {
	b, _ := json.Marshal(msg)
	ctx, cancel := context.WithTimeout(s.runCtx, 2*time.Second)
	defer cancel()
	if err := s.o.Redis.Publish(ctx, s.ks.GatewayControl(), b).Err(); err != nil {
		s.o.Logger.Warn("gateway: control channel", "op", msg.Op, "err", err)
	}
}

// cancelRemote asks the other gateways to cancel ident's request and
// reports whether one did within ControlTimeout.
func (s *Server) cancelRemote(ident Identity, request string) bool {
	id := randomID("x_")
	acked := make(chan struct{})
	s.mu.Lock()
	s.ctlWaiters[id] = acked
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ctlWaiters, id)
		s.mu.Unlock()
	}()
	s.publishControl(controlMsg{Op: "cancel", ID: id, From: s.gwID, Tenant: ident.Tenant.ID, User: ident.User, Request: request})
	t := time.NewTimer(s.o.ControlTimeout)
	defer t.Stop()
	select {
	case <-acked:
		return true
	case <-t.C:
		return false
	case <-s.runCtx.Done():
		return false
	}
}
