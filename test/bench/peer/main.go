// One run of whereabouts' own IP reconciler (pkg/reconciler, as its ip-control-loop
// calls it on its cron schedule), against the cluster of a kubeconfig: the peer row of
// the benchmark. It prints one JSON line: the addresses it released, and its wall time.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/k8snetworkplumbingwg/whereabouts/pkg/reconciler"
	"github.com/k8snetworkplumbingwg/whereabouts/pkg/storage/kubernetes"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig of the cluster")
	flag.Parse()
	start := time.Now()
	client, err := kubernetes.NewClientViaKubeconfig(*kubeconfig)
	if err != nil {
		fail(err)
	}
	looper, err := reconciler.NewReconcileLooperWithClient(client)
	if err != nil {
		fail(err)
	}
	released, err := looper.ReconcileIPPools()
	if err != nil {
		fail(err)
	}
	if err := looper.ReconcileOverlappingIPAddresses(); err != nil {
		fail(err)
	}
	ips := make([]string, 0, len(released))
	for _, ip := range released {
		ips = append(ips, ip.String())
	}
	out, _ := json.Marshal(map[string]any{"released": ips, "ms": time.Since(start).Milliseconds()})
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "peer:", err)
	os.Exit(1)
}
