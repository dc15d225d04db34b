// A differential oracle: HiveD's own pkg/algorithm driven through a JSON case, printing
// what it decides after every event. Copied into HiveD's pkg/algorithm by run_oracle.sh
// (it uses the package's internals: setBadNode, the affinity groups' lazy-preemption state).
//
// Input (HIVED_ORACLE_CASE, a JSON file):
//   {"config": "<path of a HiveD config YAML>",
//    "events": [{"op": "submit", "name": "j", "vc": "vc1", "priority": 10, "lazy": false,
//                "tasks": 2, "gpus": 1, "sku": "K80"},
//               {"op": "finish", "name": "j"}, {"op": "node_down", "node": "n0"},
//               {"op": "node_up", "node": "n0"}]}
// Output (stdout, after "ORACLE-BEGIN"): one JSON document, per event each known job's state
// ("RUNNING" or "WAITING"), its tasks' nodes and GPU indices, whether it runs downgraded.
//
// The driver plays Kubernetes' part the way LabHive's event model does: after each event it
// tries the waiting jobs in (priority desc, submit order), each job one affinity group; a
// preemption deletes every pod of each victim job (a gang stops whole) and the preemptor is
// scheduled again at once; a node going down deletes the pods of the jobs on it.
package algorithm

import (
	"encoding/json"
	"fmt"
	"io/ioutil"
	"os"
	"sort"
	"testing"

	"github.com/microsoft/hivedscheduler/pkg/api"
	"github.com/microsoft/hivedscheduler/pkg/common"
	"github.com/microsoft/hivedscheduler/pkg/internal"
	core "k8s.io/api/core/v1"
	meta "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog"
)

type oracleEvent struct {
	Op       string `json:"op"`
	Name     string `json:"name"`
	VC       string `json:"vc"`
	Priority int32  `json:"priority"`
	Lazy     bool   `json:"lazy"`
	Tasks    int32  `json:"tasks"`
	GPUs     int32  `json:"gpus"`
	SKU      string `json:"sku"`
	Node     string `json:"node"`
}

type oracleCase struct {
	Config string        `json:"config"`
	Events []oracleEvent `json:"events"`
}

type oracleTask struct {
	Node string  `json:"node"`
	GPUs []int32 `json:"gpus"`
}

type oracleJob struct {
	State      string       `json:"state"`
	Tasks      []oracleTask `json:"tasks"`
	Downgraded bool         `json:"downgraded"`
}

type oracleJobRec struct {
	ev      oracleEvent
	seq     int
	running bool
	pods    []*core.Pod // scheduling pods (unbound)
	bound   []*core.Pod // allocated pods, nil while waiting
}

type oracle struct {
	h     *HivedAlgorithm
	nodes []string
	jobs  map[string]*oracleJobRec
	order []string
	ofPod map[string]string // pod name -> job name
}

func (o *oracle) submit(ev oracleEvent) {
	rec := &oracleJobRec{ev: ev, seq: len(o.order)}
	group := &api.AffinityGroupSpec{
		Name:    ev.Name,
		Members: []api.AffinityGroupMemberSpec{{PodNumber: ev.Tasks, LeafCellNumber: ev.GPUs}},
	}
	for i := int32(0); i < ev.Tasks; i++ {
		name := fmt.Sprintf("%v-%v", ev.Name, i)
		spec := api.PodSchedulingSpec{
			VirtualCluster:       api.VirtualClusterName(ev.VC),
			Priority:             ev.Priority,
			LazyPreemptionEnable: ev.Lazy,
			LeafCellType:         ev.SKU,
			LeafCellNumber:       ev.GPUs,
			AffinityGroup:        group,
		}
		pod := &core.Pod{ObjectMeta: meta.ObjectMeta{
			Name: name, Namespace: "oracle", UID: types.UID(name),
			Annotations: map[string]string{api.AnnotationKeyPodSchedulingSpec: common.ToYaml(spec)},
		}}
		rec.pods = append(rec.pods, pod)
		o.ofPod[name] = ev.Name
	}
	o.jobs[ev.Name] = rec
	o.order = append(o.order, ev.Name)
}

// stop deletes every allocated pod of a job: it waits again (or is gone, when it finished).
func (o *oracle) stop(name string) {
	rec := o.jobs[name]
	for _, p := range rec.bound {
		if p != nil {
			o.h.DeleteAllocatedPod(p)
		}
	}
	rec.bound = nil
	rec.running = false
}

// try schedules a waiting job's pods; true if it changed anything (a start or a preemption).
func (o *oracle) try(rec *oracleJobRec) bool {
	for attempt := 0; attempt < 3; attempt++ {
		psr := o.h.Schedule(rec.pods[0], o.nodes, internal.PreemptingPhase)
		if psr.PodWaitInfo != nil {
			return attempt > 0
		}
		if psr.PodPreemptInfo != nil {
			victims := map[string]bool{}
			for _, v := range psr.PodPreemptInfo.VictimPods {
				victims[o.ofPod[v.Name]] = true
			}
			for name := range victims {
				o.stop(name)
			}
			continue
		}
		if psr.PodBindInfo == nil {
			return attempt > 0
		}
		bound := internal.NewBindingPod(rec.pods[0], psr.PodBindInfo)
		o.h.AddAllocatedPod(bound)
		rec.bound = []*core.Pod{bound}
		for _, pod := range rec.pods[1:] {
			r := o.h.Schedule(pod, o.nodes, internal.PreemptingPhase)
			if r.PodBindInfo == nil {
				panic(fmt.Sprintf("pod %v of allocated group %v not bound", pod.Name, rec.ev.Name))
			}
			b := internal.NewBindingPod(pod, r.PodBindInfo)
			o.h.AddAllocatedPod(b)
			rec.bound = append(rec.bound, b)
		}
		rec.running = true
		return true
	}
	panic(fmt.Sprintf("%v: still preempting after its victims were deleted", rec.ev.Name))
}

func (o *oracle) pass() {
	for rounds := 0; rounds < 1000; rounds++ {
		waiting := []*oracleJobRec{}
		for _, name := range o.order {
			if rec := o.jobs[name]; rec != nil && !rec.running {
				waiting = append(waiting, rec)
			}
		}
		sort.SliceStable(waiting, func(i, j int) bool {
			if waiting[i].ev.Priority != waiting[j].ev.Priority {
				return waiting[i].ev.Priority > waiting[j].ev.Priority
			}
			return waiting[i].seq < waiting[j].seq
		})
		changed := false
		for _, rec := range waiting {
			if o.try(rec) {
				changed = true
				break
			}
		}
		if !changed {
			return
		}
	}
	panic("scheduling pass did not settle")
}

func (o *oracle) snapshot() map[string]oracleJob {
	out := map[string]oracleJob{}
	for name, rec := range o.jobs {
		if rec == nil {
			continue
		}
		j := oracleJob{State: "WAITING", Tasks: []oracleTask{}}
		if rec.running {
			j.State = "RUNNING"
			for _, p := range rec.bound {
				info := internal.ExtractPodBindInfo(p)
				gpus := append([]int32{}, info.LeafCellIsolation...)
				sort.Slice(gpus, func(a, b int) bool { return gpus[a] < gpus[b] })
				j.Tasks = append(j.Tasks, oracleTask{Node: info.Node, GPUs: gpus})
			}
			if g := o.h.affinityGroups[name]; g != nil && g.lazyPreemptionStatus != nil {
				j.Downgraded = true
			}
		}
		out[name] = j
	}
	return out
}

func TestOracle(t *testing.T) {
	// klog buffers; without a flush at the end HiveD's log (bindings, doomed-bad cells) is lost.
	defer klog.Flush()
	path := os.Getenv("HIVED_ORACLE_CASE")
	if path == "" {
		t.Skip("HIVED_ORACLE_CASE is not set")
	}
	raw, err := ioutil.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c oracleCase
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	h := NewHivedAlgorithm(api.NewConfig(api.InitRawConfig(&c.Config)))
	o := &oracle{h: h, jobs: map[string]*oracleJobRec{}, ofPod: map[string]string{}}
	for _, ccl := range h.fullCellList {
		for _, cell := range ccl[CellLevel(len(ccl))] {
			o.nodes = append(o.nodes, cell.(*PhysicalCell).nodes...)
		}
	}
	// Chains of one leaf type in config order (HiveD's own order comes from Go map
	// iteration; a case that depends on it is not deterministic in HiveD itself).
	for _, chains := range h.cellChains {
		sort.SliceStable(chains, func(i, j int) bool { return chains[i] < chains[j] })
	}
	for _, n := range o.nodes {
		h.setHealthyNode(n)
	}
	// HiveD starts with every node bad and learns the healthy ones from Kubernetes; the
	// doomed-bad bindings made and undone meanwhile leave its free lists in an order that
	// depends on the order nodes were reported. LabHive ranks free cells in config order:
	// so does the oracle's starting free list.
	for chain, ccl := range h.freeCellList {
		for level, cells := range ccl {
			rank := map[Cell]int{}
			for i, c := range h.fullCellList[chain][level] {
				rank[c] = i
			}
			sort.SliceStable(cells, func(i, j int) bool { return rank[cells[i]] < rank[cells[j]] })
		}
	}
	steps := []map[string]oracleJob{}
	for _, ev := range c.Events {
		switch ev.Op {
		case "submit":
			o.submit(ev)
		case "finish":
			o.stop(ev.Name)
			o.jobs[ev.Name] = nil
		case "node_down":
			h.setBadNode(ev.Node)
			for _, name := range o.order {
				rec := o.jobs[name]
				if rec == nil || !rec.running {
					continue
				}
				for _, p := range rec.bound {
					if p.Spec.NodeName == ev.Node {
						o.stop(name)
						break
					}
				}
			}
		case "node_up":
			h.setHealthyNode(ev.Node)
		default:
			t.Fatalf("unknown op %q", ev.Op)
		}
		o.pass()
		steps = append(steps, o.snapshot())
	}
	doc, _ := json.Marshal(map[string]interface{}{"steps": steps})
	fmt.Println("ORACLE-BEGIN")
	fmt.Println(string(doc))
}
