export * from "./client"
export { Publisher } from "./publisher"
export { Consumer } from "./consumer"
export { Offset } from "./requests/subscribe_request"
