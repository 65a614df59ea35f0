// Command gitsshd is a git server over SSH on loopback for CAPTF's tests:
// it serves git-upload-pack (fetch and ls-remote, nothing else) for the
// bare repositories under -root to the one client key it makes. It writes
// that key (id_ed25519, OpenSSH format) and a known_hosts line for its own
// host key into -dir, then prints "listening HOST:PORT" and serves until
// killed. A real git server for a catalog entry's SSH credentials, with no
// sshd (which needs root and a privilege-separation user) installed.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

func main() {
	root := flag.String("root", "", "directory of the bare repositories")
	dir := flag.String("dir", "", "directory to write id_ed25519 and known_hosts into")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	if *root == "" || *dir == "" {
		log.Fatal("gitsshd: -root and -dir are required")
	}
	hostSigner, _, err := newKey()
	if err != nil {
		log.Fatal(err)
	}
	clientSigner, clientPEM, err := newKey()
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	knownHosts := fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))
	if err := os.WriteFile(filepath.Join(*dir, "id_ed25519"), clientPEM, 0o600); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "known_hosts"), []byte(knownHosts), 0o644); err != nil {
		log.Fatal(err)
	}
	want := clientSigner.PublicKey().Marshal()
	config := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(key.Marshal(), want) {
			return nil, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	config.AddHostKey(hostSigner)
	fmt.Printf("listening %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, config, *root)
	}
}

// newKey makes an ed25519 key: its signer and its private key in OpenSSH's
// PEM format.
func newKey() (ssh.Signer, []byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, err
	}
	return signer, pem.EncodeToMemory(block), nil
}

func serve(c net.Conn, config *ssh.ServerConfig, root string) {
	conn, chans, reqs, err := ssh.NewServerConn(c, config)
	if err != nil {
		log.Printf("handshake with %s: %v", c.RemoteAddr(), err)
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			continue
		}
		go session(ch, requests, root)
	}
}

// session runs the one command a session may ask for: git-upload-pack
// of a repository under root.
func session(ch ssh.Channel, requests <-chan *ssh.Request, root string) {
	defer ch.Close()
	var env []string
	for req := range requests {
		switch req.Type {
		case "env":
			// git asks for GIT_PROTOCOL=version=2 this way.
			var kv struct{ Name, Value string }
			if ssh.Unmarshal(req.Payload, &kv) == nil && kv.Name == "GIT_PROTOCOL" {
				env = append(env, kv.Name+"="+kv.Value)
			}
			_ = req.Reply(true, nil)
		case "exec":
			var cmd struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &cmd); err != nil {
				_ = req.Reply(false, nil)
				return
			}
			repo, ok := uploadPack(cmd.Command, root)
			if !ok {
				_ = req.Reply(false, nil)
				fmt.Fprintf(ch.Stderr(), "gitsshd serves git-upload-pack only, not %q\n", cmd.Command)
				return
			}
			_ = req.Reply(true, nil)
			run := exec.Command("git-upload-pack", repo)
			run.Env = append(os.Environ(), env...)
			run.Stdin, run.Stdout, run.Stderr = ch, ch, ch.Stderr()
			status := uint32(0)
			if err := run.Run(); err != nil {
				status = 1
				if exit, ok := err.(*exec.ExitError); ok {
					status = uint32(exit.ExitCode())
				}
			}
			_ = ch.CloseWrite()
			payload := make([]byte, 4)
			binary.BigEndian.PutUint32(payload, status)
			_, _ = ch.SendRequest("exit-status", false, payload)
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// uploadPack is the repository of "git-upload-pack '/name.git'", inside
// root.
func uploadPack(command, root string) (string, bool) {
	arg, ok := strings.CutPrefix(command, "git-upload-pack ")
	if !ok {
		return "", false
	}
	arg = strings.Trim(arg, "'")
	clean := path.Clean("/" + arg)
	if strings.Contains(arg, "'") || clean == "/" {
		return "", false
	}
	return filepath.Join(root, filepath.FromSlash(clean)), true
}
