"""Make the fourth real-documents development set: the Node.js API documentation as Debian
installs it on this machine (``nodejs-doc``, ``/usr/share/doc/nodejs/api/``), 27 module
pages read as a user's folder is read (``evireform index``'s
:func:`evireform.documents.load_paths`, the default embedder's tokenizer, 200-token chunks).

    python scripts/make_nodejs_devset.py [--out evireform/evaluation/devsets/nodejs]

The pages are read from their Markdown sources (``MODULE.md.gz``, decompressed into a folder
of ``MODULE.md`` files): the HTML pages of the package carry the site's navigation and each
page's table of contents into the passages' text when the package's reader reads them.

Writes ``corpus.json`` (the passages: id, title, text, metadata, as ``evireform index``
makes them), ``questions.json`` (HotpotQA format) and ``SOURCES.md`` (package, version,
files).  The questions below were written against these pages' text, in a developer's
words, before any retrieval method was run on them: ``single`` questions have their answer
in one passage; ``bridge`` questions name their second passage only through what the first
one says ("The module that querystring's docs point to when performance isn't critical:
how does it join an array value?").  Each hop is given as (module, a string its passage
holds); the script finds that passage and fails when a hop's string, or a question's
answer (case-sensitive, in the last hop's passage), is not found, when a bridge's two hops
are in the same page, or when a bridge's answer is already in its first hop's passage.
``supporting_facts`` name each hop's page by the title the reader gives it (gold = that
page's passages, as in the readmes set) with the passage's chunk number as the index;
``passages`` lists the hop passages' ids.  Another version of the documentation may differ.
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

API = Path("/usr/share/doc/nodejs/api")
PACKAGE = "nodejs-doc"
#: the module pages of the set (``API/NAME.md.gz``, or ``API/NAME.md`` where Debian left it
#: uncompressed)
MODULES = ("assert", "buffer", "child_process", "cluster", "console", "crypto", "dns",
           "events", "fs", "http", "https", "modules", "net", "os", "path", "process",
           "querystring", "readline", "stream", "string_decoder", "timers", "tls", "url",
           "util", "vm", "worker_threads", "zlib")

#: (question, answer, hops, type): hops are (module, a string the hop's passage holds, or
#: None); the last hop's passage must hold the answer (case-sensitive)
QUESTIONS = [
    # ---- single-hop: the answer in one passage -------------------------------------
    # url, querystring, path, string_decoder
    ("If I use the delete keyword on a property of a WHATWG URL object, like its protocol, "
     "what actually happens?", "has no effect but will still return true", [("url", None)],
     "single"),
    ("Is there a static method on URL that just tells me whether a string would parse, so I "
     "don't have to wrap new URL() in try/catch?", "URL.canParse",
     [("url", "Checks if an input relative to the base can be parsed")], "single"),
    ("Why would I bother calling sort() on my URL's search params?", "increase cache hits",
     [("url", None)], "single"),
    ("My file name contains a '#' and new URL() with a file: base mangles it. Which url "
     "helper builds a correct file URL from a path?", "pathToFileURL",
     [("url", "file:///foo%231")], "single"),
    ("What error does the old url.parse() throw when the user:password part can't be "
     "decoded?", "URIError", [("url", None)], "single"),
    ("Will Node issue CVEs for security bugs in url.parse()?", "CVEs are not issued",
     [("url", None)], "single"),
    ("Why don't hasOwnProperty() and toString() work on the object I get back from "
     "querystring.parse()?", "does not prototypically inherit", [("querystring", None)],
     "single"),
    ("My code runs on Linux but must handle Windows-style paths the same way everywhere. "
     "Which part of the path module do I use?", "path.win32",
     [("path", "consistent results when working with Windows file paths")], "single"),
    ("What do I get if I pass '/foo', '/bar' and 'baz' to path.resolve?", "/bar/baz",
     [("path", "would return /bar/baz")], "single"),
    # os, timers
    ("Instead of os.cpus().length, what should I call to decide how many workers to run?",
     "os.availableParallelism()",
     [("os", "should not be used to calculate the amount of parallelism")], "single"),
    ("I asked for the highest process priority on Windows without admin rights. What "
     "priority do I end up with?", "silently reduced to PRIORITY_HIGH", [("os", None)],
     "single"),
    ("What does os.userInfo() throw for a user that has no username or home directory?",
     "SystemError", [("os", "if a user has no username or homedir")], "single"),
    ("Above what delay in milliseconds does setTimeout give up and fire after 1 ms "
     "instead?", "2147483647", [("timers", "Schedules execution of a one-time callback")],
     "single"),
    ("How do I restart the countdown of a running timeout without creating a new timer "
     "object?", "timeout.refresh()",
     [("timers", "without allocating a new JavaScript object")], "single"),
    # console, readline
    ("Which Console constructor option changes how far console.group() indents nested "
     "output?", "groupIndentation", [("console", None)], "single"),
    ("How do I make console.dir() recurse through an object with no depth limit?",
     "pass null", [("console", None)], "single"),
    ("Which readline option do I set to 0 to turn history off?", "historySize",
     [("readline", "To disable the history set this value to 0")], "single"),
    ("My readline prompt keeps the script from exiting while it reads stdin. What do the "
     "docs suggest calling to quit without waiting for input?", "process.stdin.unref()",
     [("readline", None)], "single"),
    # util
    ("Which environment variable switches on the output of a logger made with "
     "util.debuglog()?", "NODE_DEBUG", [("util", "If the section name appears")], "single"),
    ("Which util.inspect option limits how many characters of a long string get printed?",
     "maxStringLength", [("util", None)], "single"),
    ("How can a library define a custom inspect function without importing util at all?",
     "Symbol.for('nodejs.util.inspect.custom')", [("util", None)], "single"),
    ("If two functions are wrapped by util.deprecate() with the same deprecation code, how "
     "many warnings do I get?", "emitted only once for that code", [("util", None)],
     "single"),
    ("Which command-line flag makes functions wrapped by util.deprecate() throw instead of "
     "warn?", "--throw-deprecation",
     [("util", "an exception will be thrown when the deprecated function is called")],
     "single"),
    ("When util.parseArgs hands back tokens, what kind is the token for a bare '--' that "
     "ends the options?", "option-terminator", [("util", None)], "single"),
    # events
    ("What is the name of the warning Node prints when too many listeners pile up on one "
     "event?", "MaxListenersExceededWarning",
     [("events", "Its name property is set to")], "single"),
    ("How do I watch an emitter's 'error' events without my listener counting as the error "
     "handler?", "events.errorMonitor", [("events", "without consuming the emitted error")],
     "single"),
    ("If the same function was added twice as a listener for one event, which copy does "
     "removeListener() take off?", "most recently added instance", [("events", None)],
     "single"),
    # process
    ("Which signal does Node.js reserve for starting the debugger?", "'SIGUSR1'",
     [("process", "reserved by Node.js to start the debugger")], "single"),
    ("My node script exited with status 13. What does that mean?",
     "Unfinished Top-Level Await", [("process", None)], "single"),
    ("What does exit code 12 mean for a Node.js process?", "Invalid Debug Argument",
     [("process", None)], "single"),
    ("Which warning does Node emit when I hand setTimeout a delay too big for a 32-bit "
     "signed integer?", "TimeoutOverflowWarning", [("process", None)], "single"),
    ("Why is calling process.umask() with no argument deprecated?",
     "race condition between threads", [("process", None)], "single"),
    # child_process
    ("How much output will exec() buffer on stdout or stderr before it kills the child?",
     "1024 * 1024", [("child_process", "Largest amount of data in bytes allowed on stdout")],
     "single"),
    ("I forked a child with a custom execPath. Which environment variable tells it which fd "
     "carries the IPC channel?", "NODE_CHANNEL_FD", [("child_process", None)], "single"),
    ("I sent {cmd: 'NODE_foo'} to a child and its 'message' handler never fired. Which "
     "event gets messages like that instead?", "'internalMessage'",
     [("child_process", None)], "single"),
    # cluster
    ("How does the cluster module hand out incoming connections by default on Linux?",
     "round-robin", [("cluster", "default one on all platforms except Windows")], "single"),
    ("Which cluster worker property lets the primary tell a voluntary exit from a crash?",
     "exitedAfterDisconnect", [("cluster", "voluntary and accidental exit")], "single"),
    # worker_threads
    ("Can I transfer a network socket to a worker thread the way I can to a child "
     "process?", "transferring handles such as network sockets is currently not supported",
     [("worker_threads", None)], "single"),
    ("How do I make sure an ArrayBuffer is always copied and never moved when I post it to "
     "a worker?", "markAsUntransferable()",
     [("worker_threads", "always be cloned and never transferred")], "single"),
    ("What error do I get if I put a MessagePort into workerData but don't list it in "
     "transferList?", "ERR_MISSING_MESSAGE_PORT_IN_TRANSFER_LIST",
     [("worker_threads", None)], "single"),
    # net
    ("How long can a Unix domain socket path be on Linux before it gets truncated?",
     "107 bytes on Linux", [("net", None)], "single"),
    ("Which listen() option turns off dual-stack so binding to :: doesn't also bind "
     "0.0.0.0?", "ipv6Only", [("net", None)], "single"),
    ("How do I abort a TCP connection with an RST packet instead of a normal close?",
     "socket.resetAndDestroy()", [("net", "sending an RST packet")], "single"),
    # dns
    ("What error code do pending callbacks get when I cancel all queries of a dns "
     "Resolver?", "ECANCELLED", [("dns", "Cancel all outstanding DNS queries")], "single"),
    ("Does dns.setServers() change how dns.lookup() resolves names?",
     "specifically not dns.lookup()", [("dns", None)], "single"),
    # http, https
    ("How long does an HTTP server keep an idle keep-alive socket open by default after the "
     "last response?", "5000 (5 seconds)",
     [("http", "The number of milliseconds of inactivity a server needs to wait")],
     "single"),
    ("What status code does the server send when a client takes too long to send all of "
     "its headers?", "status 408", [("http", "complete HTTP headers")], "single"),
    ("How are repeated set-cookie headers represented in message.headers?",
     "set-cookie is always an array", [("http", None)], "single"),
    ("Which method sends a 103 response so the browser can start preloading linked "
     "resources?", "response.writeEarlyHints", [("http", "Early Hints")], "single"),
    ("Which https.Agent option do I set to 0 to switch off TLS session caching?",
     "maxCachedSessions", [("https", None)], "single"),
    ("In what format does the 'keylog' event hand over its lines, e.g. for Wireshark?",
     "NSS SSLKEYLOGFILE format", [("https", None)], "single"),
    # tls
    ("How often may a TLS client renegotiate before Node treats it as an attack?",
     "three times every ten minutes", [("tls", None)], "single"),
    ("Which two TLSv1.3 cipher suites are supported but not enabled by default?",
     "two CCM-based suites", [("tls", None)], "single"),
    ("Which X509 error code means the peer sent a self-signed certificate?",
     "DEPTH_ZERO_SELF_SIGNED_CERT", [("tls", None)], "single"),
    # crypto
    ("Why is the deprecated crypto.createCipher() considered weak? Which OpenSSL function "
     "does it derive keys with?", "EVP_BytesToKey", [("crypto", "one iteration, and no salt")],
     "single"),
    ("What's the longest passphrase createPrivateKey() accepts for an encrypted key?",
     "limited to 1024 bytes", [("crypto", None)], "single"),
    ("Which crypto function should I use to compare two HMAC digests without leaking "
     "timing?", "crypto.timingSafeEqual", [("crypto", "constant-time algorithm")], "single"),
    ("How long must the nonce be when using AES in CCM mode?", "between 7 and 13 bytes",
     [("crypto", None)], "single"),
    # stream
    ("What's the largest size I can ask readable.read() for in one call?",
     "less than or equal to 1 GiB", [("stream", None)], "single"),
    ("If a piped readable errors out, is the writable it was piped into closed "
     "automatically?", "is not closed automatically", [("stream", None)], "single"),
    # zlib
    ("Which zlib class figures out by itself whether the data is gzip or deflate?",
     "auto-detecting the header", [("zlib", None)], "single"),
    ("Which Brotli parameter plays the role of zlib's compression level?",
     "BROTLI_PARAM_QUALITY", [("zlib", "zlib's level option matches")], "single"),
    ("What should I read instead of the deprecated zlib.bytesRead?", "zlib.bytesWritten",
     [("zlib", "Deprecated alias")], "single"),
    # buffer
    ("Which command-line option makes Buffer.allocUnsafe() hand out zero-filled memory "
     "anyway?", "--zero-fill-buffers", [("buffer", None)], "single"),
    ("What does buffer.transcode() put in place of a euro sign when converting to ASCII?",
     "replaced with ?", [("buffer", None)], "single"),
    ("Does Buffer's slice() copy the bytes like TypedArray's does?",
     "creates a view over the existing Buffer without copying", [("buffer", None)],
     "single"),
    # assert
    ("What code property do all errors thrown by node:assert carry?", "ERR_ASSERTION",
     [("assert", None)], "single"),
    ("How do I turn off the colours in assertion error diffs?",
     "NO_COLOR or NODE_DISABLE_COLORS", [("assert", None)], "single"),
    # vm
    ("Can I use the vm module to sandbox untrusted code?", "not a security mechanism",
     [("vm", None)], "single"),
    ("What file name shows up in stack traces for code run by vm.Script when I don't give "
     "one?", "'evalmachine.<anonymous>'", [("vm", None)], "single"),
    ("Which command flag do I need before vm.Module and its subclasses work?",
     "--experimental-vm-modules", [("vm", None)], "single"),
    # modules
    ("What error do I get when I require() an ES module file?", "ERR_REQUIRE_ESM",
     [("modules", None)], "single"),
    ("What error does import() give when pointed at a folder instead of a file?",
     "ERR_UNSUPPORTED_DIR_IMPORT", [("modules", None)], "single"),
    ("What separates the entries of NODE_PATH on Windows?", "delimited by semicolons",
     [("modules", None)], "single"),
    # fs
    ("What does fs.watch use under the hood on Linux?", "inotify(7)", [("fs", None)],
     "single"),
    ("What happens if I pass recursive: true to fs.watch on a platform that doesn't "
     "support it?", "ERR_FEATURE_UNAVAILABLE_ON_PLATFORM", [("fs", None)], "single"),
    ("How often does fs.watchFile poll the file by default, in milliseconds?", "5007",
     [("fs", "interval {integer}")], "single"),
    ("Which file-open flag tells the OS to skip the local file system cache, e.g. for NFS "
     "mounts?", "'rs+'", [("fs", "bypass the local file system cache")], "single"),
    ("On Windows, writing to an existing hidden file with the 'w' flag fails. Which flag "
     "works instead?", "'r+' flag", [("fs", "hidden file")], "single"),
    # ---- two-hop "bridge": the second page named only by what the first one says -----
    ("querystring's docs point to a standardized class for when performance isn't "
     "critical or browser compatibility matters. If I build that class from a plain object "
     "with an array value, how are the array's items combined?",
     "joins all array elements with commas",
     [("querystring", "Use {URLSearchParams} when performance is not critical"),
      ("url", None)], "bridge"),
    ("The legacy URL object's query property can be an object produced by another module's "
     "parse function. Which option of that parse function caps how many keys it reads?",
     "maxKeys", [("url", "querystring module's parse() method"), ("querystring", None)],
     "bridge"),
    ("The cluster docs size their pool of workers with a function from another module. "
     "What is the smallest value that function can ever return, per its docs?",
     "greater than zero", [("cluster", "availableParallelism"), ("os", None)], "bridge"),
    ("A Timeout's numeric id only works in the thread that created it and has to be passed "
     "around between threads of a certain module. In that module, which property tells "
     "code whether it is running on the main thread?", "isMainThread",
     [("timers", "to use it across worker_threads"),
      ("worker_threads", "Is true if this code is not running inside of a Worker thread")],
     "bridge"),
    ("console.dir() hands the object to another module's formatting function. Which option "
     "of that function caps how many array elements are shown?", "maxArrayLength",
     [("console", "Uses util.inspect() on obj"), ("util", None)], "bridge"),
    ("console.log() passes its arguments to a printf-like helper. What does that helper "
     "print for %j when the value has circular references?", "'[Circular]'",
     [("console", "the arguments are all passed to util.format()"), ("util", None)],
     "bridge"),
    ("The Console constructor forwards its inspectOptions to a function in another "
     "module. Which of that function's options sets the line length at which output is "
     "split across lines?", "breakLength",
     [("console", "Specifies options that are passed along to util.inspect()"),
      ("util", None)], "bridge"),
    ("When an emitter exceeds its listener limit, the warning can be caught through an "
     "event on a global object. Which command-line option stops such warnings from being "
     "printed to stderr while that event still fires?", "--no-warnings",
     [("events", "process.on('warning')"), ("process", None)], "bridge"),
    ("If the callback of a function made by util.callbackify() throws, a process-level "
     "event is emitted. If nothing handles that event, with what exit code does Node "
     "quit?", "exiting with code 1",
     [("util", "the process will emit an 'uncaughtException' event"), ("process", None)],
     "bridge"),
    ("Errors thrown inside EventTarget listeners are raised as uncaught exceptions from a "
     "certain process deferral function. According to that function's docs, what should I "
     "use instead when in doubt?", "use queueMicrotask()",
     [("events", "treated as an uncaught exception on process.nextTick()"),
      ("process", "When in doubt")], "bridge"),
    ("The console docs warn that its methods aren't consistently synchronous and point to "
     "a note in another module's docs. Per that note, are writes to a terminal synchronous "
     "on Linux?", "synchronous on POSIX",
     [("console", "See the note on process I/O"), ("process", "TTYs (Terminals)")],
     "bridge"),
    ("process.mainModule is deprecated in favour of another property. Using that property, "
     "how does a file check whether it was run directly by node rather than required?",
     "require.main === module",
     [("process", "Use require.main instead"), ("modules", None)], "bridge"),
    ("A child's process-level 'message' event can carry data JSON can't represent when a "
     "certain spawn option was set. That serialization is based on which algorithm?",
     "HTML structured clone algorithm",
     [("process", "serialization option was set to advanced"), ("child_process", None)],
     "bridge"),
    ("subprocess.kill() sends a certain signal when you don't name one. If the child is a "
     "Node process on Linux with no listener for that signal, what exit code does it end "
     "with?", "128 + signal number",
     [("child_process", "the process will be sent the 'SIGTERM' signal"),
      ("process", None)], "bridge"),
    ("Cluster workers are spawned with a function from another module. Which option of "
     "that function sets the executable used to create the child process?", "execPath",
     [("cluster", "The worker processes are spawned using the child_process.fork() method"),
      ("child_process", "Executable used to create the child process")], "bridge"),
    ("cluster.settings has a serialization setting that points to another module's "
     "'advanced' mode. Is that mode a superset of JSON?", "not a full superset of JSON",
     [("cluster", "See Advanced serialization for child_process"),
      ("child_process", None)], "bridge"),
    ("The cluster docs suggest a different module when process isolation isn't needed. How "
     "do that module's threads share memory?", "sharing SharedArrayBuffer instances",
     [("cluster", "When process isolation is not needed"), ("worker_threads", None)],
     "bridge"),
    ("TLS session ticket keys are shared automatically between the workers of a certain "
     "core module. Which environment variable sets that module's scheduling policy?",
     "NODE_CLUSTER_SCHED_POLICY",
     [("tls", "automatically shared between"), ("cluster", None)], "bridge"),
    ("The child_process docs warn against using a certain server property on sockets that "
     "were handed to a subprocess. When a server hits that property's limit, which event "
     "does it emit instead of accepting the connection?", "'drop'",
     [("child_process", "Do not use .maxConnections on a socket"), ("net", None)],
     "bridge"),
    ("The events docs open with a server class that emits an event every time a peer "
     "connects. What does that server's address() method return before it starts "
     "listening?", "server.address() returns null",
     [("events", "a net.Server object emits an event each time a peer connects"),
      ("net", None)], "bridge"),
    ("A worker's postMessage can carry a native object from the networking module that "
     "holds rules for blocking IP addresses. Which of its methods blocks a whole CIDR "
     "subnet?", "addSubnet", [("worker_threads", "{net.BlockList}s"), ("net", None)],
     "bridge"),
    ("process.stdin is normally an instance of a socket class from another module. With "
     "that class, what happens to incoming data when no 'data' listener is attached?",
     "The data will be lost",
     [("process", "process.stdin property returns a stream connected to stdin"),
      ("net", None)], "bridge"),
    ("fs read streams should not be given non-blocking fds; the fs docs send those to a "
     "class from another module instead. What does that class's fd constructor option "
     "do?", "wrap around an existing socket",
     [("fs", "non-blocking fds should be passed to {net.Socket}"), ("net", None)],
     "bridge"),
    ("The dns docs say one TCP connect method lets you replace the default resolver. In "
     "that method's options, which RFC section does the family autodetection algorithm "
     "loosely implement?", "section 5 of RFC 8305",
     [("dns", "allow the default resolver, dns.lookup(), to be replaced"), ("net", None)],
     "bridge"),
    ("request.setSocketKeepAlive() on an HTTP request just calls a socket method from "
     "another module. Which TCP_KEEPCNT value does that method set?", "TCP_KEEPCNT=10",
     [("http", "socket.setKeepAlive() will be called"), ("net", None)], "bridge"),
    ("request.setNoDelay() on an HTTP request forwards to a socket method. Which algorithm "
     "does that method switch off?", "Nagle's algorithm",
     [("http", "socket.setNoDelay() will be called"), ("net", "Passing true for noDelay")],
     "bridge"),
    ("The HTTP server class extends a server class from another module. What error does "
     "that base class throw if you call listen() again while it is already listening?",
     "ERR_SERVER_ALREADY_LISTEN", [("http", "Extends: {net.Server}"), ("net", None)],
     "bridge"),
    ("By default an HTTP Agent creates its sockets with a factory function from another "
     "module. Which shorter function is an alias of that factory?",
     "The net.connect() function is an alias",
     [("http", "By default, this function is the same as net.createConnection()"),
      ("net", None)], "bridge"),
    ("net sockets resolve host names with a default lookup function from another module. "
     "Which C library call does that function make under the hood?", "getaddrinfo(3)",
     [("net", "Custom lookup function. Default: dns.lookup()"),
      ("dns", "runs on libuv's threadpool")], "bridge"),
    ("http.request() resolves hosts with a default lookup function from another module. "
     "What error code does that function report when the host name doesn't exist?",
     "'ENOTFOUND'", [("http", "Custom lookup function. Default: dns.lookup()"),
                     ("dns", None)], "bridge"),
    ("The url helper that turns a WHATWG URL into a plain options object targets two "
     "request functions. In the plain-HTTP one, which option sends the request over a Unix "
     "domain socket?", "socketPath",
     [("url", "as expected by the http.request() and https.request() APIs"),
      ("http", "Unix domain socket")], "bridge"),
    ("The HTTPS server class is built on a server class from another module. When a "
     "client asks to resume an earlier TLS session, which event does that base class "
     "emit?", "'resumeSession'", [("https", "Extends: {tls.Server}"),
                          ("tls", "client requests to resume a previous TLS session")],
     "bridge"),
    ("https.createServer() also takes the options of another module's createServer. How "
     "long may a TLS handshake take by default before the connection is aborted?",
     "120000 (120 seconds)", [("https", "Accepts options from tls.createServer()"),
                              ("tls", "handshakeTimeout")], "bridge"),
    ("https.request() passes some options through to another module's connect function. "
     "Which of that function's own options sets the smallest Diffie-Hellman parameter size "
     "it accepts?", "minDHSize",
     [("https", "The following additional options from tls.connect() are also accepted"),
      ("tls", None)], "bridge"),
    ("The HTTP docs say to call a certain socket method to get a client's certificate "
     "details over HTTPS. If you ask that method for the full chain, which property links "
     "each certificate to its issuer?", "issuerCertificate",
     [("http", "request.socket.getPeerCertificate()"),
      ("tls", "If the full certificate chain was requested")], "bridge"),
    ("A TLS socket can return the peer's certificate as an object of a crypto class. "
     "According to that class's docs, which property should I use as a unique identifier "
     "instead of the serial number?", "x509.fingerprint256",
     [("tls", "Returns the peer certificate as an {X509Certificate} object"),
      ("crypto", "do not uniquely identify certificates")], "bridge"),
    ("A worker's postMessage can carry certificate objects of a crypto class. When that "
     "class checks a certificate against an IP address, which subject alternative names "
     "does it consider?", "RFC 5280 iPAddress subject alternative names",
     [("worker_threads", "{X509Certificate}s"), ("crypto", None)], "bridge"),
    ("The TLS docs say a server can turn session tickets off with an OpenSSL option "
     "constant passed in secureOptions. According to the crypto constants table, which "
     "kind of tickets does that constant disable?", "RFC4507bis tickets",
     [("tls", "The server can disable tickets by supplying"), ("crypto", None)], "bridge"),
    ("The TLS option that makes a server prefer its own cipher order works by setting an "
     "OpenSSL flag. Which other OpenSSL flag, for favouring ChaCha20-Poly1305, has no "
     "effect unless that flag is set?", "SSL_OP_PRIORITIZE_CHACHA",
     [("tls", "honorCipherOrder {boolean}"), ("crypto", None)], "bridge"),
    ("crypto's Cipher objects extend a stream class. If I write my own subclass of that "
     "stream class, which method must I implement?", "transform._transform()",
     [("crypto", "Instances of the Cipher class are used to encrypt data"),
      ("stream", "Custom Transform implementations must implement")], "bridge"),
    ("crypto's Sign objects extend a stream class. When implementing a subclass of that "
     "class, which optional method processes several buffered chunks in one go?",
     "writable._writev()",
     [("crypto", "The Sign class is a utility for generating signatures"),
      ("stream", "capable of processing multiple chunks")], "bridge"),
    ("TCP sockets extend a stream base class. From which class does that base class "
     "inherit only parasitically?", "parasitically from stream.Writable",
     [("net", "Extends: {stream.Duplex}"), ("stream", None)], "bridge"),
    ("process.stdin's docs mention an 'old' streams mode and point to a compatibility "
     "note. Per that note, what happens in Node 0.10+ to a socket with no 'data' "
     "listener that is never resumed or piped?", "remains paused forever",
     [("process", "Stream compatibility"), ("stream", None)], "bridge"),
    ("The process.stdin docs send you to a stream method for reading it. What's the "
     "largest size argument that method accepts?", "less than or equal to 1 GiB",
     [("process", "For details of how to read from stdin see readable.read()"),
      ("stream", None)], "bridge"),
    ("net.createServer()'s highWaterMark option defaults to whatever a stream helper "
     "returns. What does that helper return for streams not in object mode?",
     "Defaults to 16384 (16 KiB)",
     [("net", "stream.getDefaultHighWaterMark()"), ("stream", None)], "bridge"),
    ("socket.bufferSize is deprecated in favour of a property of writable streams. Besides "
     "bytes, what can that property count?", "bytes (or objects) in the queue ready to be "
     "written", [("net", "Use writable.writableLength instead"), ("stream", None)],
     "bridge"),
    ("HTTP's IncomingMessage extends a stream class. In that class, what does data come "
     "out as when no encoding has been set?", "returned as Buffer objects",
     [("http", "the IncomingMessage itself extends {stream.Readable}"), ("stream", None)],
     "bridge"),
    ("The stream docs give a function from another module as their example of a Transform "
     "stream. In that module, which option, together with windowBits, sets how much "
     "memory deflate needs?", "memLevel",
     [("stream", "for example, zlib.createDeflate()"), ("zlib", "memory requirements")],
     "bridge"),
    ("zlib's compressor classes inherit from a stream class. Which optional method of that "
     "class lets an implementation push out extra data at the very end, before 'end'?",
     "transform._flush()",
     [("zlib", "This class inherits from stream.Transform"),
      ("stream", "emit an additional bit of data at the end")], "bridge"),
    ("The stream docs recommend a class from another module for decoding multi-byte "
     "characters in a writable. What does that class's end() do with incomplete bytes "
     "left in its buffer?", "replaced with substitution characters",
     [("stream", "Decoding buffers in a writable stream"), ("string_decoder", None)],
     "bridge"),
    ("zlib's convenience methods cap their output by default at a constant of another "
     "module. On 64-bit machines, roughly how large is that limit?", "about 4 GiB",
     [("zlib", "Default: buffer.kMaxLength"), ("buffer", "On 64-bit architectures")],
     "bridge"),
    ("The HTTP docs tell you to compute Content-Length with a static method of another "
     "class. For which encodings does that method assume the input is valid?",
     "'base64', 'base64url', and 'hex'",
     [("http", "Use Buffer.byteLength() to determine the length of the body in bytes"),
      ("buffer", None)], "bridge"),
    ("worker_threads says Buffers carved from Node's internal pool can't be transferred. "
     "How many bytes is that pre-allocated pool by default?", "8192",
     [("worker_threads", "created from the internal Buffer pool"),
      ("buffer", "pre-allocated internal Buffer instances used for pooling")], "bridge"),
    ("URL.createObjectURL() registers an object of a class from another module. When you "
     "build such an object from strings, what happens to unmatched surrogate pairs?",
     "U+FFFD replacement characters",
     [("url", "Creates a 'blob:nodedata:...' URL string"), ("buffer", None)], "bridge"),
    ("string_decoder turns objects of a certain class into strings. That class is a "
     "subclass of which built-in JavaScript type?", "subclass of JavaScript's Uint8Array",
     [("string_decoder", "decoding Buffer objects into strings"), ("buffer", None)],
     "bridge"),
    ("util.isDeepStrictEqual() refers to an assertion function for its rules. Under those "
     "rules, how are primitive values compared?", "compared using Object.is()",
     [("util", "See assert.deepStrictEqual()"), ("assert", None)], "bridge"),
    ("worker.moveMessagePortToContext() needs an object produced by a function of another "
     "module. What does that function return if you call it without an object?",
     "a new, empty contextified object",
     [("worker_threads", "A contextified object as returned by the vm.createContext()"),
      ("vm", None)], "bridge"),
    ("vm's breakOnSigint option temporarily disables listeners for a certain process "
     "signal event. When is that signal not generated from the terminal?",
     "when terminal raw mode is enabled",
     [("vm", "process.on('SIGINT') are disabled"), ("process", None)], "bridge"),
    ("require() loads .node addon files through a lower-level process function. What is "
     "that function's default flags value?", "os.constants.dlopen.RTLD_LAZY",
     [("modules", ".node files are interpreted as compiled addon modules loaded with"),
      ("process", None)], "bridge"),
    ("process.dlopen() takes its flags from a constants group documented in another "
     "module. Which constant of that group makes a self-contained library prefer its own "
     "symbols over previously loaded ones?", "RTLD_DEEPBIND",
     [("process", "See the os.constants.dlopen documentation"), ("os", None)], "bridge"),
    ("__dirname is documented as the result of a path function applied to __filename. "
     "Which Unix command does that function resemble?", "Unix dirname command",
     [("modules", "This is the same as the path.dirname() of the __filename"),
      ("path", None)], "bridge"),
    ("The require() pseudocode turns a package exports match into a file path with a url "
     "helper. What does that helper guarantee about percent-encoded characters?",
     "correct decodings of percent-encoded characters",
     [("modules", "fileURLToPath(MATCH)"), ("url", None)], "bridge"),
    ("The readline docs read a file line by line through a file stream API from another "
     "module. What default highWaterMark does that module's read stream use?", "64 KiB",
     [("readline", "leveraging the fs.ReadStream API"),
      ("fs", "fs.createReadStream(path")], "bridge"),
    ("filehandle.readLines() returns an interface from another core module. According to "
     "that module's docs, what's the downside of consuming it with for await...of?",
     "can be a bit slower",
     [("fs", "Convenience method to create a readline interface"), ("readline", None)],
     "bridge"),
    ("A worker's postMessage can carry an fs object that wraps a numeric file descriptor. "
     "What happens if you never close one of those objects?", "emit a process warning",
     [("worker_threads", "{FileHandle}s"), ("fs", "is not closed using the filehandle.close()")],
     "bridge"),
    ("fs resolves relative paths against the result of a process function. The process "
     "method that changes that directory throws when?",
     "if the specified directory does not exist",
     [("fs", "as determined by calling process.cwd()"), ("process", None)], "bridge"),
    ("The worker_threads docs compare their message passing with that of the core module "
     "for multi-process servers. How does that module spawn its worker processes?",
     "spawned using the child_process.fork() method",
     [("worker_threads", "Like Web Workers and the node:cluster module"),
      ("cluster", None)], "bridge"),
    ("A cluster worker's .process property holds what another module's spawning function "
     "returned. According to that module, how many IPC stdio file descriptors may such a "
     "child have?", "at most one IPC stdio file descriptor",
     [("cluster", "All workers are created using child_process.fork()"),
      ("child_process", None)], "bridge"),
    ("With exclusive left at false, a net server shares its handle with the workers of a "
     "certain core module. In that module, what happens when each worker calls listen(0)?",
     "predictable thereafter",
     [("net", "If exclusive is false (default), then cluster workers"), ("cluster", None)],
     "bridge"),
    ("https.get() is described as the HTTPS twin of a function in another module. What "
     "does that function do for you that request() doesn't?",
     "calls req.end() automatically", [("https", "Like http.get() but for HTTPS"),
                                       ("http", None)], "bridge"),
    ("https.request() returns an object of a class from another module. If no 'response' "
     "handler is added to that object, what happens to the response?",
     "the response will be entirely discarded",
     [("https", "https.request() returns an instance of the http.ClientRequest class"),
      ("http", None)], "bridge"),
    ("The stream docs name a file function as their example of a Writable stream. Which "
     "flag does that function need if I want to modify a file rather than replace it?",
     "r+ rather than the default w",
     [("stream", "for example, fs.createWriteStream()"), ("fs", None)], "bridge"),
    ("The events docs mention a file stream class that emits an event when its file is "
     "opened. Which event of that class fires right after that one?",
     "Fires immediately after 'open'",
     [("events", "a fs.ReadStream emits an event when the file is opened"),
      ("fs", "{fs.ReadStream} is ready to be used")], "bridge"),
    ("Node's stdout and stderr streams are used internally by two console methods. Which "
     "further console method is just an alias of the stderr one?", "console.warn()",
     [("process", "They are used internally by console.log() and console.error()"),
      ("console", None)], "bridge"),
    ("Node overwrites argv[0] in a spawned Node child, and the child_process docs name "
     "another property for the original value. How do the process docs describe that "
     "property?", "read-only copy of the original value of argv[0]",
     [("child_process", "Retrieve it with the process.argv0 property instead"),
      ("process", None)], "bridge"),
    ("exec() can be turned into a promise-returning function with a helper from another "
     "module. Which symbol lets a function override what that helper returns?",
     "util.promisify.custom",
     [("child_process", "If this method is invoked as its util.promisify()ed version"),
      ("util", None)], "bridge"),
    ("TLS sockets extend a socket class from another module. When that class's idle "
     "timeout fires, is the connection closed?", "the connection will not be severed",
     [("tls", "Extends: {net.Socket}"), ("net", None)], "bridge"),
    ("readline's basic example reads from a standard stream of the process object. In "
     "that stream's legacy 'old' mode, what must you call before you can read from it?",
     "process.stdin.resume()",
     [("readline", "from a Readable stream (such as process.stdin)"),
      ("process", "streams mode the stdin stream is paused by default")],
     "bridge"),
]


def _norm(text: str) -> str:
    return " ".join(str(text).split())


def _source(name: str) -> Path:
    for rel in (f"{name}.md.gz", f"{name}.md"):
        if (API / rel).is_file():
            return API / rel
    raise SystemExit(f"{API}/{name}.md(.gz) not found: install Debian's {PACKAGE}")


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _corpus(folder: Path) -> list[dict]:
    """The passages of ``folder`` as ``evireform index`` reads it."""
    from evireform.documents import load_paths
    from evireform.embed import get_embedder
    got = load_paths(folder, embedder=get_embedder("minilm"))
    return [{"id": p.id, "title": p.title, "text": p.text, "metadata": p.metadata}
            for p in got.passages]


def _resolve(recs: list[dict]) -> list[dict]:
    """Each question's hop passages, checked (see the module docstring); the records."""
    by_module: dict[str, list[dict]] = {}
    for r in recs:
        by_module.setdefault(Path(r["metadata"]["source"]).stem, []).append(r)
    titles = {m: {r["title"] for r in rs} for m, rs in by_module.items()}
    for m, t in titles.items():
        if len(t) != 1:
            raise SystemExit(f"{m}: passages with several titles {sorted(t)}")
    if len({next(iter(t)) for t in titles.values()}) != len(titles):
        raise SystemExit("two pages share a title: supporting_facts would be ambiguous")
    out, problems = [], []
    for n, (question, answer, hops, qtype) in enumerate(QUESTIONS):
        found = []
        for h, (module, key) in enumerate(hops):
            wants = [_norm(k) for k in (key,) if k]
            if h == len(hops) - 1:
                wants.append(_norm(answer))
            hit = next((r for r in by_module.get(module, [])
                        if all(w in _norm(r["text"]) for w in wants)), None)
            if hit is None:
                problems.append(f"q{n} hop {h} ({module}): no passage holds {wants}")
                break
            found.append(hit)
        else:
            if qtype == "bridge":
                if len(hops) != 2 or hops[0][0] == hops[1][0]:
                    problems.append(f"q{n}: a bridge needs two hops in two pages")
                elif _norm(answer) in _norm(found[0]["text"]):
                    problems.append(f"q{n}: the answer is already in the first hop")
            elif len(hops) != 1:
                problems.append(f"q{n}: a single-hop question has one hop")
            out.append({"_id": f"nj{n:03d}", "question": question, "answer": answer,
                        "type": qtype,
                        "supporting_facts": [[r["title"], r["metadata"]["chunk"]]
                                             for r in found],
                        "passages": [r["id"] for r in found]})
    if problems:
        raise SystemExit("questions do not match the pages:\n" + "\n".join(problems))
    return out


def _sources_md(counts: dict[str, int], questions: list[dict]) -> str:
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", PACKAGE], check=False,
                             capture_output=True, text=True).stdout.strip() or "?"
    n_single = sum(q["type"] == "single" for q in questions)
    lines = ["# Sources", "",
             f"The Node.js API documentation as Debian's `{PACKAGE}` {version} installs it "
             "under `/usr/share/doc/nodejs/api/` (made by `scripts/make_nodejs_devset.py`; "
             "Expat (MIT) license, per `/usr/share/doc/nodejs-doc/copyright`). The Markdown "
             "source of each module page was "
             "decompressed into a folder of `MODULE.md` files and read as `evireform index` "
             "reads a user's folder (`evireform.documents.load_paths`, 200-token chunks); "
             "the HTML pages of the package bring the site navigation and the page's table "
             "of contents into the passages when read, so they were not used.", "",
             "| file | passages |", "|---|---|"]
    lines += [f"| `{_source(m).name}` | {n} |" for m, n in counts.items()]
    lines += ["", f"{sum(counts.values())} passages from {len(counts)} pages.", "",
              "## questions.json", "",
              f"{len(questions)} questions, {n_single} single-hop and "
              f"{len(questions) - n_single} two-hop (`bridge`), written by hand against "
              "these pages' text before any retrieval method was run on them, in a "
              "developer's words rather than the documentation's:", "",
              "- a single-hop question's answer is in one passage of one page;",
              "- a bridge question's first page names a thing (a class another module "
              "extends, a function it delegates to, a module it points to) that the "
              "question describes only by what that page says of it, never by its name; "
              "the second page, the one the first points to, holds the answer; the two "
              "pages differ, and the first hop's passage does not hold the answer;",
              "- every answer is a short string found verbatim (case-sensitive) in the last "
              "hop's passage, chosen to be distinctive (a function, option, error code, "
              "constant or default with its unit) rather than a word any passage holds.", "",
              "`supporting_facts` name each hop's page by its title (the gold is that page's "
              "passages, one piece of evidence per page, as in the readmes set) with the hop "
              "passage's chunk number as the index; `passages` lists the hop passages' ids "
              "(first hop first) for measures at the passage level. The script checks all "
              "of this and fails when a page of another version no longer matches.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "evireform/evaluation/devsets/nodejs"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "nodejs"
        folder.mkdir()
        for m in MODULES:
            (folder / f"{m}.md").write_bytes(_read(_source(m)))
        recs = _corpus(folder)
    counts = {m: sum(Path(r["metadata"]["source"]).stem == m for r in recs) for m in MODULES}
    questions = _resolve(recs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.json").write_text(json.dumps(recs, ensure_ascii=False, indent=0) + "\n",
                                     encoding="utf-8")
    (out / "questions.json").write_text(json.dumps(questions, ensure_ascii=False, indent=1)
                                        + "\n", encoding="utf-8")
    (out / "SOURCES.md").write_text(_sources_md(counts, questions), encoding="utf-8")
    n_single = sum(q["type"] == "single" for q in questions)
    print(f"{len(recs)} passages from {len(MODULES)} pages, {len(questions)} questions "
          f"({n_single} single-hop, {len(questions) - n_single} bridge) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
