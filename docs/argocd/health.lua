-- Argo CD health check for looprun.io/Loop. Add it to argocd-cm as
--   resource.customizations.health.looprun.io_Loop: |
--     <this file>
-- It reads the Loop's kstatus conditions (Ready, Reconciling, Stalled):
-- running -> Progressing, suspended or paused on its budget -> Suspended,
-- completed -> Healthy,
-- failed, stopped at a limit or invalid -> Degraded.
local hs = {}
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to start the Loop"
  return hs
end
if obj.metadata ~= nil and obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to see the latest spec"
  return hs
end
local ready = nil
local stalled = nil
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then ready = c end
    if c.type == "Stalled" and c.status == "True" then stalled = c end
  end
end
if stalled ~= nil then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. (stalled.message or "")
  return hs
end
if obj.status.phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = "Suspended by spec.suspend"
  return hs
end
if obj.status.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "Paused: the budget is spent; raise spec.budget to go on"
  if ready ~= nil and ready.message ~= nil then
    hs.message = ready.message
  end
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
hs.status = "Progressing"
if ready ~= nil and ready.message ~= nil then
  hs.message = ready.message
else
  hs.message = "Running"
end
return hs
