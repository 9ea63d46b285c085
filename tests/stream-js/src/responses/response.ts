export interface Response {
  code: number
  ok: boolean
  key: number
  correlationId: number
}
