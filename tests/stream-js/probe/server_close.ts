// server_close.ts - a probe for test_stream_server_close.py: RabbitMQ's Node.js stream client
// (the vendored one, src/) connects to PORT and VHOST, prints "open", then waits for the
// server to end the connection (its vhost or user deleted, or the node shutting down). It
// prints "closed" when the client's connection_closed listener runs, "error: ..." for an
// uncaught exception (the client throws "Unknown response 22" on a Close frame it cannot
// take), and exits after 10 s at most.
import { connect } from "../src"

const [port, vhost] = [Number(process.argv[2]), process.argv[3] ?? "/"]
process.on("uncaughtException", (e) => {
  console.log(`error: ${e.message}`)
  process.exit(2)
})
setTimeout(() => {
  console.log("timeout")
  process.exit(3)
}, 10000)
connect({
  hostname: "127.0.0.1",
  port,
  username: "guest",
  password: "guest",
  vhost,
  addressResolver: { enabled: false },
  listeners: {
    connection_closed: (hadError: boolean) => {
      console.log(`closed hadError=${hadError}`)
      setTimeout(() => process.exit(0), 200) // an exception after the close would still show
    },
  },
})
  .then(() => console.log("open"))
  .catch((e) => {
    console.log(`connect failed: ${e.message}`)
    process.exit(4)
  })
