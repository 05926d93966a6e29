// franz-go through kafka-mirror-proxy: admin, idempotent and transactional produce, consumer groups
// (classic and KIP-848), and a produce to a mirror topic that must fail fast.
//
// Run by tests/kafka_it/proxy.rs (franz_go_through_the_proxy) as
//
//	go run . -bootstrap HOST:PORT -topic T -mirror-topic M -txn-id ID -group-prefix G
//
// It prints one JSON object per step on stdout and exits 1 at the first unexpected failure (with a
// {"step":…,"fatal":…} line). The mirror step reports the error the client gives the application.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var out = json.NewEncoder(os.Stdout)

func emit(v map[string]any) { _ = out.Encode(v) }

func fatal(step string, err error) {
	emit(map[string]any{"step": step, "fatal": err.Error()})
	os.Exit(1)
}

func main() {
	bootstrap := flag.String("bootstrap", "", "proxy bootstrap host:port")
	topic := flag.String("topic", "", "topic to create and use")
	mirror := flag.String("mirror-topic", "", "an existing mirror topic (writes refused)")
	txnID := flag.String("txn-id", "", "transactional id")
	groupPrefix := flag.String("group-prefix", "", "consumer group name prefix")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	seeds := kgo.SeedBrokers(*bootstrap)

	// Admin: create and describe the topic, list brokers.
	adminClient, err := kgo.NewClient(seeds)
	if err != nil {
		fatal("admin", err)
	}
	admin := kadm.NewClient(adminClient)
	created, err := admin.CreateTopics(ctx, 2, 1, nil, *topic)
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		fatal("create", err)
	}
	var meta kadm.Metadata
	for i := 0; i < 50; i++ {
		meta, err = admin.Metadata(ctx, *topic)
		if err == nil && len(meta.Topics[*topic].Partitions) == 2 && meta.Topics[*topic].Err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		fatal("describe", err)
	}
	brokers := []map[string]any{}
	for _, b := range meta.Brokers {
		brokers = append(brokers, map[string]any{"id": b.NodeID, "host": b.Host, "port": b.Port})
	}
	emit(map[string]any{"step": "describe", "partitions": len(meta.Topics[*topic].Partitions), "brokers": brokers})
	adminClient.Close()

	// Idempotent produce (franz-go's default).
	producer, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic(*topic))
	if err != nil {
		fatal("produce", err)
	}
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("idempotent-%d", i))})
	}
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		fatal("produce", err)
	}
	emit(map[string]any{"step": "produce", "count": len(recs)})
	producer.Close()

	// Transactional produce: one committed and one aborted transaction.
	txn, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic(*topic), kgo.TransactionalID(*txnID))
	if err != nil {
		fatal("transaction", err)
	}
	for _, commit := range []bool{true, false} {
		if err := txn.BeginTransaction(); err != nil {
			fatal("transaction", err)
		}
		var recs []*kgo.Record
		for i := 0; i < 5; i++ {
			recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("txn-%v-%d", commit, i))})
		}
		if err := txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			fatal("transaction", err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			fatal("transaction", err)
		}
	}
	emit(map[string]any{"step": "transaction", "committed": 5, "aborted": 5})
	txn.Close()

	// Consumer groups, read_committed: the 10 + 5 committed records, offsets committed.
	for _, protocol := range []string{"classic", "consumer"} {
		opts := []kgo.Opt{
			seeds,
			kgo.ConsumerGroup(*groupPrefix + "-" + protocol),
			kgo.ConsumeTopics(*topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.DisableAutoCommit(),
		}
		if protocol == "consumer" {
			opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
		}
		consumer, err := kgo.NewClient(opts...)
		if err != nil {
			fatal("group-"+protocol, err)
		}
		values := 0
		for values < 15 {
			fetches := consumer.PollFetches(ctx)
			if errs := fetches.Errors(); len(errs) > 0 {
				fatal("group-"+protocol, errs[0].Err)
			}
			values += fetches.NumRecords()
		}
		if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
			fatal("group-"+protocol, err)
		}
		consumer.Close()
		emit(map[string]any{"step": "group", "protocol": protocol, "records": values})
	}

	// A produce to the mirror topic: must fail, fast, with a non-retriable error.
	refused, err := kgo.NewClient(seeds, kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		fatal("mirror", err)
	}
	start := time.Now()
	err = refused.ProduceSync(ctx, &kgo.Record{Topic: *mirror, Value: []byte("refused")}).FirstErr()
	elapsed := time.Since(start).Milliseconds()
	if err == nil {
		fatal("mirror", errors.New("the produce to the mirror topic succeeded"))
	}
	var ke *kerr.Error
	code := 0
	if errors.As(err, &ke) {
		code = int(ke.Code)
	}
	emit(map[string]any{"step": "mirror", "error": err.Error(), "code": code, "retriable": kerr.IsRetriable(err), "elapsed_ms": elapsed})
	refused.Close()
}
