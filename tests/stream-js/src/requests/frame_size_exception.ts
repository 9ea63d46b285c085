export class FrameSizeException extends Error {}
