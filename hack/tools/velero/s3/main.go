// Command s3 is the disaster-recovery test's S3 stand-in: an in-memory
// object store (gofakes3) holding one bucket, where Velero's AWS plugin
// keeps its backups. It prints the address it listens on and serves until
// killed.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "address to listen on")
	bucket := flag.String("bucket", "velero", "the bucket to create")
	flag.Parse()

	backend := s3mem.New()
	if err := backend.CreateBucket(*bucket); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "http://%s\n", l.Addr())
	log.Fatal(http.Serve(l, gofakes3.New(backend).Server()))
}
