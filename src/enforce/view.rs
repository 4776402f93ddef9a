//! Placeholder until the view lands.
use super::StepError;
/// Prepared view.
pub struct PreparedView;
/// Prepare.
pub fn prepare(_mounts: &[crate::plan::Mount]) -> anyhow::Result<PreparedView> {
    anyhow::bail!("the view is not implemented yet")
}
impl PreparedView {
    /// Apply.
    pub fn apply(&self) -> Result<(), StepError> {
        Err(StepError {
            step: "view",
            errno: libc::ENOSYS,
        })
    }
}
