// Package deploy holds egressd's deployment artefacts: the build script, the
// docker-compose file, the Kubernetes manifests and their example configs.
// It has no Go code of its own; its tests decode every artefact strictly and
// check the isolation properties the deployment depends on, so a typo or a
// drifting port fails CI instead of a rollout.
package deploy
