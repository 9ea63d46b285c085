module.exports = {
  require: ["tsx", "test/index.ts"],
  extension: ["ts"],
  recursive: true,
}
