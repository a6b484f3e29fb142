"""JSON pieces of events: shapes, module names and types, a module's
parameters, DTensor placements and meshes, a DTensor op's arguments.

``EventText`` is a base of commdebug.recorder.Recorder; the texts it caches
live on the Recorder (_name_json, _type_json, _param_cache,
_placements_json, _mesh_json).
"""

import json

from . import _compat as C

_dumps = json.dumps


def _ints(shape):
    out = []
    for d in shape:
        try:
            out.append(int(d))
        except Exception:
            out.append(0)
    return out


def _shape_json(shape):
    return "[" + ",".join([str(d) for d in _ints(shape)]) + "]"


class EventText:
    """The Recorder's cached JSON texts of names, types, parameters,
    placements and meshes."""

    def _nj(self, name):
        j = self._name_json.get(name)
        if j is None:
            j = self._name_json[name] = _dumps(name)
        return j

    def _type_of(self, mod):
        cls = type(mod)
        j = self._type_json.get(cls)
        if j is None:
            j = self._type_json[cls] = _dumps(cls.__module__ + "." + cls.__qualname__)
        return j

    def _params_json(self, mod):
        """fw_pre's params list for mod, cached per module while its
        parameters (identity, shape, dtype, requires_grad) stay the same.
        Returns the json text."""
        key = tuple([(k, id(p), p.requires_grad, p.shape, p.dtype)
                     for k, p in mod._parameters.items() if p is not None])
        hit = self._param_cache.get(mod)
        if hit is not None and hit[0] == key:
            return hit[1]
        parts = []
        DT = C.DTensor
        for pname, p in mod.named_parameters(recurse=False):
            shape = _ints(p.shape)
            n = 1
            for d in shape:
                n *= d
            s = ('{"name":%s,"shape":[%s],"dtype":"%s","nbytes":%d,"requires_grad":%s'
                 % (_dumps(pname), ",".join([str(d) for d in shape]), str(p.dtype),
                    n * p.element_size(), "true" if p.requires_grad else "false"))
            if DT is not None and isinstance(p, DT):
                s += ',"placements":%s,"mesh":%s' % (self._plc_json(p.placements),
                                                      self._mesh_js(p.device_mesh))
            parts.append(s + "}")
        text = "[" + ",".join(parts) + "]"
        try:
            self._param_cache[mod] = (key, text)
        except TypeError:
            pass
        return text

    def _plc_json(self, placements):
        try:
            j = self._placements_json.get(placements)
        except TypeError:
            return _dumps(str(placements))
        if j is None:
            j = self._placements_json[placements] = _dumps(str(placements))
        return j

    def _mesh_js(self, mesh):
        e = self._mesh_json.get(id(mesh))
        if e is None or e[0] is not mesh:
            e = self._mesh_json[id(mesh)] = (mesh, _dumps(str(mesh)))
        return e[1]

    def _dtensor_line(self, func, bw, args):
        DT = C.DTensor
        parts = []
        for a in args:
            if isinstance(a, DT):
                parts.append('{"shape":%s,"placements":%s,"mesh":%s}'
                             % (_shape_json(a.shape), self._plc_json(a.placements),
                                self._mesh_js(a.device_mesh)))
        return ('{"ev":"op","name":%s,"bw":%s,"dt":true,"args":[%s],"fake":false'
                % (_dumps(str(func)), "true" if bw else "false", ",".join(parts)))
