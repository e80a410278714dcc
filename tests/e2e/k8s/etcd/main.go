// Command etcd is upstream's etcd server, built from the version that
// k8s.io/kubernetes itself requires, so the e2e control plane needs no
// separately downloaded etcd release.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
