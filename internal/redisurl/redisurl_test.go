package redisurl

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		url   string
		kind  Kind
		addrs []string
		check func(t *testing.T, c *Config)
	}{
		{"redis://127.0.0.1:6380/", Single, []string{"127.0.0.1:6380"}, nil},
		{"redis://:pw@h:1/2", Single, []string{"h:1"}, func(t *testing.T, c *Config) {
			if c.Single.Password != "pw" || c.Single.DB != 2 || c.Single.TLSConfig != nil {
				t.Errorf("have %+v; want password pw, db 2, no TLS", c.Single)
			}
		}},
		{"rediss://u:p@h:1", Single, []string{"h:1"}, func(t *testing.T, c *Config) {
			if c.Single.TLSConfig == nil || c.Single.Username != "u" {
				t.Errorf("have TLS %v user %q; want TLS and user u", c.Single.TLSConfig, c.Single.Username)
			}
		}},
		{"unix:///tmp/r.sock?db=3", Single, []string{"/tmp/r.sock"}, nil},
		{"redis+cluster://h1:7001,h2:7002,h3:7003", Cluster, []string{"h1:7001", "h2:7002", "h3:7003"}, func(t *testing.T, c *Config) {
			if c.Cluster.TLSConfig != nil || c.Cluster.Password != "" {
				t.Errorf("have TLS %v password %q; want neither", c.Cluster.TLSConfig, c.Cluster.Password)
			}
		}},
		{"redis+cluster://h1:7001?addr=h2:7002&addr=h3:7003", Cluster, []string{"h1:7001", "h2:7002", "h3:7003"}, nil},
		{"rediss+cluster://u:p%40ss@h1:7001,h2:7002/?dial_timeout=2s", Cluster, []string{"h1:7001", "h2:7002"}, func(t *testing.T, c *Config) {
			o := c.Cluster
			if o.TLSConfig == nil || o.Username != "u" || o.Password != "p@ss" || o.DialTimeout != 2*time.Second {
				t.Errorf("have TLS %v user %q password %q dial %v; want TLS, u, p@ss, 2s", o.TLSConfig, o.Username, o.Password, o.DialTimeout)
			}
		}},
		{"redis+cluster://h1,h2:7002", Cluster, []string{"h1:6379", "h2:7002"}, nil},
		{"redis+sentinel://s1:26379,s2:26380/mymaster", Sentinel, []string{"s1:26379", "s2:26380"}, func(t *testing.T, c *Config) {
			if c.Failover.MasterName != "mymaster" || c.Failover.DB != 0 {
				t.Errorf("have master %q db %d; want mymaster, 0", c.Failover.MasterName, c.Failover.DB)
			}
		}},
		{"redis+sentinel://:secret@s1:26379/mymaster/4?sentinel_password=spw&addr=s3:1", Sentinel, []string{"s1:26379", "s3:1"}, func(t *testing.T, c *Config) {
			o := c.Failover
			if o.Password != "secret" || o.SentinelPassword != "spw" || o.DB != 4 || o.TLSConfig != nil {
				t.Errorf("have password %q sentinel password %q db %d TLS %v; want secret, spw, 4, none", o.Password, o.SentinelPassword, o.DB, o.TLSConfig)
			}
		}},
		{"rediss+sentinel://u:p@s1:26379/m?skip_verify=true", Sentinel, []string{"s1:26379"}, func(t *testing.T, c *Config) {
			o := c.Failover
			if o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify || o.Username != "u" || o.Password != "p" {
				t.Errorf("have %+v; want TLS without verify, user u, password p", o)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			c, err := Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if c.Kind != tt.kind || !slices.Equal(c.Addrs(), tt.addrs) {
				t.Fatalf("have %s %v; want %s %v", c.Kind, c.Addrs(), tt.kind, tt.addrs)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
			if rdb := c.NewClient(); rdb == nil {
				t.Fatal("no client")
			} else {
				rdb.Close()
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ url, want string }{
		{"127.0.0.1:6379", "want scheme://"},
		{"http://h:1", "unknown scheme"},
		{"redis+ring://h:1", "unknown scheme"},
		{"unix+cluster:///s", "unknown scheme"},
		{"redis://h1:1,h2:2", "redis+cluster://"},
		{"redis+cluster://", "no address"},
		{"redis+cluster://h:1/3", "only database 0"},
		{"redis+cluster://h:1?nonsense=1", "unexpected option"},
		{"redis+cluster://h:1?addr=nohost", "want host:port"},
		{"redis+sentinel://s:1", "mastername"},
		{"redis+sentinel://s:1/m/x", "invalid database number"},
		{"redis+sentinel://:hunter2@s:1/m/x/y", "mastername"},
		{"redis://:hunter2@h:1/x", "invalid database number"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := Parse(tt.url)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("have %v; want an error with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q repeats the password", err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:1/":     "redis://h:1/",
		"redis://:pw@h:1/": "redis://:xxxxx@h:1/",
		"redis+sentinel://u:pw@s:1/m?sentinel_password=x": "redis+sentinel://u:xxxxx@s:1/m?sentinel_password=xxxxx",
	} {
		if have := Redact(in); have != want {
			t.Errorf("Redact(%q): have %q; want %q", in, have, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"redis://h:1/", "redis+cluster://a:1,b:2?addr=c:3", "rediss+sentinel://u:p@s:1/m/2?sentinel_password=x", "unix:///s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			return
		}
		if len(c.Addrs()) == 0 {
			t.Fatalf("%q parsed with no address", s)
		}
		_ = Redact(s)
	})
}
