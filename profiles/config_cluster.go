package profiles

import (
	"net"
	"path/filepath"
)

// ClusterConfig makes several forge replicas serve the same sessions: each
// session's state lives in a directory every replica mounts, and a request
// for a session another live replica holds is forwarded to it.
type ClusterConfig struct {
	Enabled   bool   `yaml:"enabled" doc:"Run as one replica of several (docs/deploy.md): sessions live in shared_dir, any replica serves any session (forwarding a call to the replica that holds it, or taking it over from one that is gone), every call's variables and /workspace are checkpointed to shared_dir before it is answered, and a stopping replica hibernates its sessions there. Needs sessions.persist."`
	SharedDir string `yaml:"shared_dir" doc:"Required when enabled: absolute path of a directory every replica mounts read-write (in Kubernetes a ReadWriteMany volume; on one host any directory). It must support flock(2) across the replicas (a local file system, NFSv4): a session's lock is its owner's lease."`
	Advertise string `yaml:"advertise" doc:"host:port at which the other replicas reach this one's HTTP listener. Empty means $POD_IP with the listener's port when POD_IP is set, else the listener's address."`
	Member    string `yaml:"member" doc:"This replica's name in session records and logs. Empty means the host name (the pod name in Kubernetes)."`
}

func (c *Config) validateCluster(p *problems) {
	cl := &c.Cluster
	if !cl.Enabled {
		return
	}
	if cl.SharedDir == "" || !filepath.IsAbs(cl.SharedDir) {
		p.add("cluster.shared_dir", "want an absolute directory path every replica mounts, got %q", cl.SharedDir)
	}
	if !c.Sessions.Persist {
		p.add("cluster.enabled", "needs sessions.persist: true (a replica hands its sessions over by hibernating them)")
	}
	if cl.Advertise != "" {
		if _, _, err := net.SplitHostPort(cl.Advertise); err != nil {
			p.add("cluster.advertise", "want host:port, got %q", cl.Advertise)
		}
	}
}
