//! DLPack, through dlpark: symmetric memory exported as a tensor torch or numpy can take
//! (`torch.from_dlpack`, `numpy.from_dlpack`), and any DLPack producer described as an address and a size.

use std::ffi::c_void;

use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::python::{DlpackExporter, ExportRequest, ImportedDlpack, export_dlpack, from_dlpack};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use ferrocomm::{Device, SymBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors;

/// An element type the collectives take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    /// From the names torch and numpy give (`"float32"`, `"torch.bfloat16"`, ...).
    pub fn parse(name: &str) -> Option<Dtype> {
        match name.trim_start_matches("torch.") {
            "float32" | "float" | "f32" => Some(Dtype::F32),
            "float16" | "half" | "f16" => Some(Dtype::F16),
            "bfloat16" | "bf16" => Some(Dtype::Bf16),
            _ => None,
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    fn dl(self) -> DLDataType {
        match self {
            Dtype::F32 => DLDataType::F32,
            Dtype::F16 => DLDataType { code: DLDataTypeCode::FLOAT, bits: 16, lanes: 1 },
            Dtype::Bf16 => DLDataType { code: DLDataTypeCode::BFLOAT, bits: 16, lanes: 1 },
        }
    }
}

/// A DLPack element type as numpy names it.
fn dtype_name(dl: DLDataType) -> String {
    let kind = match dl.code {
        DLDataTypeCode::INT => "int",
        DLDataTypeCode::UINT => "uint",
        DLDataTypeCode::FLOAT => "float",
        DLDataTypeCode::BFLOAT => "bfloat",
        DLDataTypeCode::BOOL => return "bool".into(),
        other => return format!("DLPack type code {}", other.0),
    };
    let lanes = if dl.lanes > 1 { format!("x{}", dl.lanes) } else { String::new() };
    format!("{kind}{}{lanes}", dl.bits)
}

/// Where a rank's memory is, as DLPack says it: a CUDA device, or the CPU for the emulator.
pub fn dl_device(device: Device) -> DLDevice {
    match device {
        Device::Cuda { ordinal } => DLDevice::cuda(ordinal as i32),
        Device::Emulated { .. } => DLDevice::CPU,
    }
}

/// One rank's part of a symmetric allocation, shaped as a tensor, ready for `from_dlpack`.
#[pyclass(frozen, module = "ferrocomm._C")]
pub struct DlpackExport {
    /// Keeps the memory alive; every capsule made from it holds an alias too.
    buf: SymBuffer<u8>,
    addr: u64,
    shape: Vec<i64>,
    dtype: DLDataType,
    device: DLDevice,
}

impl DlpackExport {
    /// Rank `rank`'s part of `buf` as a tensor of `shape` and `dtype`; the product of `shape` times the
    /// element size must fit in the part.
    pub fn new(py: Python<'_>, buf: &SymBuffer<u8>, rank: usize, shape: Vec<i64>, dtype: Dtype) -> PyResult<Self> {
        let elems = shape.iter().try_fold(1usize, |n, &d| usize::try_from(d).ok().and_then(|d| n.checked_mul(d)));
        let Some(bytes) = elems.and_then(|n| n.checked_mul(dtype.bytes())) else {
            return Err(errors::input(py, "RequirementError", "shape", format!("{shape:?} is not a valid shape")));
        };
        if bytes > buf.len() {
            return Err(errors::input(
                py,
                "RequirementError",
                "shape",
                format!("{shape:?} of {} bytes exceeds the allocation's {} bytes", dtype.bytes(), buf.len()),
            ));
        }
        let addr = buf.address(rank).map_err(|e| errors::runtime(py, e))?;
        let device = dl_device(buf.device(rank).map_err(|e| errors::runtime(py, e))?);
        // SAFETY: the alias only keeps the memory alive and hands out its address; ferrocomm launches nothing
        // through it.
        let buf = unsafe { buf.alias::<u8>(buf.len()) }.map_err(|e| errors::runtime(py, e))?;
        Ok(DlpackExport { buf, addr, shape, dtype: dtype.dl(), device })
    }

    fn managed<M: ManagedTensorBase>(&self) -> PyResult<Managed<M>> {
        // Each capsule owns an alias of the buffer: torch frees the memory by dropping it, and the buffer's
        // drop waits for the kernels still using it (ferrocomm's launches in flight) before freeing.
        // SAFETY: as in `new`.
        let owner =
            unsafe { self.buf.alias::<u8>(self.buf.len()) }.map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut tensor = Dynamic::compact(self.shape.clone())
            .initialize_as::<M>(Box::new(owner))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        tensor.set_data(self.addr as usize as *mut c_void).set_device(self.device).set_dtype(self.dtype);
        // SAFETY: the address is the part's base, which the owner keeps allocated for the capsule's life; the
        // shape fits the part (checked in `new`); compact strides come from the metadata builder.
        Ok(unsafe { tensor.finish() })
    }
}

impl std::fmt::Debug for DlpackExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DlpackExport").field("addr", &self.addr).field("shape", &self.shape).finish()
    }
}

impl DlpackExporter for DlpackExport {
    fn device(&self) -> DLDevice {
        self.device
    }

    fn flags(&self) -> DlpackFlags {
        DlpackFlags::empty()
    }

    /// Nothing to order: the memory was zeroed before the allocation returned, and what ferrocomm writes
    /// later is ordered on the stream the caller launches on.
    fn prepare_export(&self, _py: Python<'_>, _request: &ExportRequest<'_>) -> PyResult<()> {
        Ok(())
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        self.managed()
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.managed()
    }
}

#[pymethods]
impl DlpackExport {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        export_dlpack(self, py, ExportRequest::parse(stream.as_ref(), max_version, dl_device, copy)?)
    }

    fn __dlpack_device__(&self) -> (u32, i32) {
        (self.device.device_type.0, self.device.device_id)
    }
}

/// What a collective needs to know of a tensor: where it is, how large, of what type.
#[derive(Debug, Clone)]
pub struct Described {
    pub addr: u64,
    pub numel: usize,
    /// Its element type as numpy names it (`"float32"`, `"int64"`, `"bfloat16"`).
    pub dtype: String,
    /// `None` for the CPU, else the CUDA ordinal.
    pub cuda: Option<i32>,
}

/// Describes any DLPack producer (numpy arrays, cupy, jax): its address, element count, type and device;
/// refuses a non-contiguous one.
pub fn describe(py: Python<'_>, object: &Bound<'_, PyAny>, argument: &str) -> PyResult<Described> {
    let imported = from_dlpack(object.as_borrowed(), None, None)?;
    let tensor = match &imported {
        ImportedDlpack::Legacy(t) => t.validate(),
        ImportedDlpack::Versioned(t) => t.validate(),
    }
    .map_err(|e| errors::input(py, "RequirementError", argument, format!("not a valid DLPack tensor: {e}")))?;
    let compact = tensor
        .is_compact()
        .map_err(|e| errors::input(py, "RequirementError", argument, format!("not a valid DLPack tensor: {e}")))?;
    if !compact {
        return Err(errors::input(
            py,
            "RequirementError",
            argument,
            "is not contiguous; pass a contiguous tensor (`.contiguous()`, `numpy.ascontiguousarray`)".into(),
        ));
    }
    let device = tensor.device();
    let cuda = match device.device_type {
        DLDeviceType::CPU => None,
        DLDeviceType::CUDA => Some(device.device_id),
        other => {
            return Err(errors::input(
                py,
                "ForeignBufferError",
                argument,
                format!("lives on DLPack device type {}; ferrocomm takes CUDA or CPU memory", other.0),
            ));
        }
    };
    Ok(Described {
        addr: tensor.data_ptr() as u64 + tensor.byte_offset(),
        numel: tensor.num_elements(),
        dtype: dtype_name(tensor.dtype()),
        cuda,
    })
}
