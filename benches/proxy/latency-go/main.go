// proxy-latency: end-to-end latency of Kafka records at a fixed rate, written with franz-go. The same
// measurement as benches/proxy/ProxyLatency.java (same flags, same JSON line), for a client that
// needs less CPU than a JVM: on a 2-core machine the Java tool's producer and consumer take CPU the
// broker and the proxy need, and its garbage collection pauses land in both paths' tails.
//
// One process runs a producer (acks=all, idempotent) sending --rate records/s for --duration-s
// seconds after --warmup-s seconds of warm-up, each value starting with the nanoseconds since the
// process started, and a consumer (no group, every partition, from the end) that records now - then
// per record in an HdrHistogram (microseconds, 3 significant digits). The producer's send-to-ack
// latency goes into a second histogram. Warm-up records carry -1 and are not recorded.
//
//	go build -o PROGRAM . && PROGRAM --bootstrap HOST:PORT --topic T [--rate 5000] [--duration-s 30]
//	    [--warmup-s 5] [--record-size 1024] [--linger-ms 0] [--batch-size 16384]
//
// Prints one JSON line: sent (measured phase), sent_all (warm-up included), received, achieved rate,
// e2e and ack p50/p99/p99.9/max in microseconds.
//
// With --bootstrap-b HOST:PORT --topic-b T2, the same process measures two paths in alternation: a
// second producer and consumer pair on the second path, and the paced schedule of records goes to
// the first path for --window-ms, then to the second for as long, and so on (warm-up included). The
// load on the machine stays the same throughout; only the path changes. Each path's latencies go
// into histograms of their own, so the two paths are compared over the same minutes: a slow phase
// of a shared machine, which in back-to-back runs lands on one path only, is split between them.
// The JSON line then has one object per path under "paths" (same keys), "rate_achieved" for both
// together, and "sent_all".
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Highest latency recorded, µs (a minute; larger values are clamped to it).
const maxMicros = 60_000_000

// A histogram several goroutines record into.
type recorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newRecorder() *recorder { return &recorder{h: hdrhistogram.New(1, maxMicros, 3)} }

func (r *recorder) record(d time.Duration) {
	us := min(max(d.Microseconds(), 1), maxMicros)
	r.mu.Lock()
	_ = r.h.RecordValue(us)
	r.mu.Unlock()
}

// reset empties the histogram (the end of the warm-up).
func (r *recorder) reset() {
	r.mu.Lock()
	r.h.Reset()
	r.mu.Unlock()
}

func (r *recorder) percentiles() (p50, p99, p999, maxv int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h.ValueAtQuantile(50), r.h.ValueAtQuantile(99), r.h.ValueAtQuantile(99.9), r.h.Max()
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "proxy-latency: %s: %v\n", what, err)
	os.Exit(1)
}

// One path: a producer and a consumer through one bootstrap address, and what they measured.
type path struct {
	producer, consumer *kgo.Client
	e2e, ack           *recorder
	received, sent     atomic.Int64
	readerDone         chan struct{}
}

// openPath connects a producer and a consumer to `bootstrap` for `topic` and starts the consumer's
// reader, which records each measured record's end-to-end latency until ctx is cancelled.
func openPath(ctx context.Context, bootstrap, topic string, lingerMs, batchSize int, base time.Time) *path {
	producer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(time.Duration(lingerMs)*time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(batchSize)),
		kgo.DefaultProduceTopic(topic),
		// Uncompressed, as the Java tool (franz-go compresses with snappy by default, which would
		// shrink these mostly-zero values to a fraction of the bytes the Java tool moves).
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		fail("producer", err)
	}
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMinBytes(1),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		fail("consumer", err)
	}
	p := &path{producer: producer, consumer: consumer, e2e: newRecorder(), ack: newRecorder(), readerDone: make(chan struct{})}
	go func() {
		defer close(p.readerDone)
		for {
			fetches := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Since(base)
			fetches.EachError(func(t string, p int32, err error) {
				fmt.Fprintf(os.Stderr, "proxy-latency: fetch %s-%d: %v\n", t, p, err)
			})
			fetches.EachRecord(func(r *kgo.Record) {
				if len(r.Value) < 8 {
					return
				}
				if then := int64(binary.BigEndian.Uint64(r.Value)); then > 0 {
					p.received.Add(1)
					p.e2e.record(now - time.Duration(then))
				}
			})
		}
	}()
	return p
}

// result is the JSON object of one path's measurements.
func (p *path) result() map[string]any {
	e50, e99, e999, emax := p.e2e.percentiles()
	a50, a99, a999, amax := p.ack.percentiles()
	return map[string]any{
		"sent":        p.sent.Load(),
		"received":    p.received.Load(),
		"e2e_p50_us":  e50,
		"e2e_p99_us":  e99,
		"e2e_p999_us": e999,
		"e2e_max_us":  emax,
		"ack_p50_us":  a50,
		"ack_p99_us":  a99,
		"ack_p999_us": a999,
		"ack_max_us":  amax,
	}
}

func main() {
	bootstrap := flag.String("bootstrap", "", "bootstrap host:port")
	topic := flag.String("topic", "", "an existing topic")
	rate := flag.Int("rate", 5000, "records per second")
	durationS := flag.Int("duration-s", 30, "measured seconds")
	warmupS := flag.Int("warmup-s", 5, "warm-up seconds (not recorded)")
	size := flag.Int("record-size", 1024, "value bytes (at least 16)")
	lingerMs := flag.Int("linger-ms", 0, "producer linger, ms")
	batchSize := flag.Int("batch-size", 16384, "largest producer batch, bytes")
	bootstrapB := flag.String("bootstrap-b", "", "a second path's bootstrap host:port, measured in alternation")
	topicB := flag.String("topic-b", "", "the second path's existing topic")
	windowMs := flag.Int("window-ms", 100, "with a second path: how long each path has the schedule in turn")
	flag.Parse()
	if *bootstrap == "" || *topic == "" || *rate <= 0 {
		fail("arguments", fmt.Errorf("--bootstrap, --topic and a positive --rate are required"))
	}
	if (*bootstrapB == "") != (*topicB == "") || *windowMs <= 0 {
		fail("arguments", fmt.Errorf("--bootstrap-b and --topic-b go together, and --window-ms must be positive"))
	}
	recordSize := max(*size, 16)
	base := time.Now()

	ctx, stop := context.WithCancel(context.Background())
	paths := []*path{openPath(ctx, *bootstrap, *topic, *lingerMs, *batchSize, base)}
	if *bootstrapB != "" {
		paths = append(paths, openPath(ctx, *bootstrapB, *topicB, *lingerMs, *batchSize, base))
	}
	defer func() {
		for _, p := range paths {
			p.producer.Close()
			p.consumer.Close()
		}
	}()
	window := time.Duration(*windowMs) * time.Millisecond
	// The consumer starts at the end of each partition once it has looked the ends up, which the
	// warm-up (its records carry -1) leaves time for.

	// Paced without spinning: sleep until the next record is due and send every record due by then.
	interval := time.Second / time.Duration(*rate)
	start := time.Now()
	warmupEnd := start.Add(time.Duration(*warmupS) * time.Second)
	end := warmupEnd.Add(time.Duration(*durationS) * time.Second)
	next := start
	var measuredStart time.Time
	sentAll := int64(0)
	measuring := false
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if now.Before(next) {
			time.Sleep(next.Sub(now))
			continue
		}
		next = next.Add(interval)
		measure := !now.Before(warmupEnd)
		if measure && !measuring {
			// Records the warm-up fell behind on are not sent in a burst: the schedule restarts now.
			measuring = true
			next = now.Add(interval)
			for _, p := range paths {
				p.e2e.reset()
				p.ack.reset()
				p.received.Store(0)
			}
			measuredStart = now
		}
		p := paths[int(now.Sub(start)/window)%len(paths)]
		value := make([]byte, recordSize)
		sendAt := time.Since(base)
		stamp := int64(-1)
		if measure {
			stamp = int64(sendAt)
			p.sent.Add(1)
		}
		binary.BigEndian.PutUint64(value, uint64(stamp))
		sentAll++
		p.producer.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				fmt.Fprintf(os.Stderr, "proxy-latency: send failed: %v\n", err)
				return
			}
			if measure {
				p.ack.record(time.Since(base) - sendAt)
			}
		})
	}
	for _, p := range paths {
		if err := p.producer.Flush(ctx); err != nil {
			fail("flush", err)
		}
	}
	measuredEnd := time.Now()
	// Give the consumer time to read the last records (as the Java tool does).
	time.Sleep(2 * time.Second)
	stop()
	sentMeasured := int64(0)
	for _, p := range paths {
		<-p.readerDone
		sentMeasured += p.sent.Load()
	}

	seconds := measuredEnd.Sub(measuredStart).Seconds()
	var out map[string]any
	if len(paths) == 1 {
		out = paths[0].result()
	} else {
		out = map[string]any{"paths": []map[string]any{paths[0].result(), paths[1].result()}, "window_ms": *windowMs}
	}
	out["rate_target"] = *rate
	out["sent_all"] = sentAll
	out["rate_achieved"] = float64(sentMeasured) / seconds
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
